# cmake --install: headers, libraio, the raio CLI, a CMake package (raio::raio) and a
# pkg-config file. Included at the end of the top-level CMakeLists.txt, after every
# target exists, so RPATHs are set as target properties (CMAKE_INSTALL_RPATH would only
# reach targets created after it).
include(CMakePackageConfigHelpers)
set_target_properties(raio PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(raio_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY include/raio DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The include directory reaches raio::raio through the target's INSTALL_INTERFACE.
install(TARGETS raio EXPORT raioTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS raio_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The jobs API server `raio start --head` runs from the CLI's directory; it links libraio.
set_target_properties(raio_jobs_server PROPERTIES
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS raio_jobs_server RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT raioTargets NAMESPACE raio:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/raio)
configure_package_config_file(cmake/raioConfig.cmake.in
  ${PROJECT_BINARY_DIR}/raioConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/raio)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/raioConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/raioConfig.cmake ${PROJECT_BINARY_DIR}/raioConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/raio)

# raio.pc: relative to ${pcfiledir} when the install dirs are relative (the default), so
# `cmake --install --prefix <other>` gives a working file; absolute paths otherwise.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(RAIO_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(RAIO_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(RAIO_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH _raio_pc_up "/raio-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/raio-prefix")
  string(REGEX REPLACE "/+$" "" _raio_pc_up "${_raio_pc_up}")
  set(RAIO_PC_PREFIX "\${pcfiledir}/${_raio_pc_up}")
  set(RAIO_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(RAIO_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/raio.pc.in ${PROJECT_BINARY_DIR}/raio.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/raio.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

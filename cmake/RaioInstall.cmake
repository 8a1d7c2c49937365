# cmake --install: headers, libraio, the raio CLI, a CMake package (raio::raio) and a
# pkg-config file.
include(CMakePackageConfigHelpers)
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set_target_properties(raio_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY include/raio DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS raio EXPORT raioTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS raio_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT raioTargets NAMESPACE raio:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/raio)
configure_package_config_file(cmake/raioConfig.cmake.in
  ${PROJECT_BINARY_DIR}/raioConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/raio)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/raioConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/raioConfig.cmake ${PROJECT_BINARY_DIR}/raioConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/raio)
configure_file(cmake/raio.pc.in ${PROJECT_BINARY_DIR}/raio.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/raio.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

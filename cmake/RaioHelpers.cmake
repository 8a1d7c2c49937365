# raio_cc_test(NAME SRCS... [LABELS l...] [DEPS d...]): a GoogleTest binary registered
# with ctest under the given labels (default: unit).
function(raio_cc_test name)
  cmake_parse_arguments(T "" "" "SRCS;LABELS;DEPS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${name} ${T_SRCS})
  target_link_libraries(${name} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT 300)
endfunction()

# raio_sandboxed_test(NAME COMMAND [ARG...]): a test that starts processes (daemons, workers,
# drivers, test hosts), run through tests/sandbox.sh: as root, in its own PID, mount and
# network namespaces, so that whatever it started dies with it when ctest kills it at its
# timeout, with TMPDIR ${build}/test-tmp/NAME. The raio_cleanup fixture (tests/CMakeLists.txt)
# removes what a killed run left outside a sandbox before the first such test and after the
# last. COMMAND is a path or a generator expression ($<TARGET_FILE:...>), not a target name.
function(raio_sandboxed_test name)
  add_test(NAME ${name}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/sandbox.sh ${CMAKE_BINARY_DIR}/test-tmp/${name}
            ${ARGN})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED raio_cleanup)
endfunction()

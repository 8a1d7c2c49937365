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

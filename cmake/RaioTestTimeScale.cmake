# The test time scale on the ctest side: the same table as src/raio/testkit/time_scale.h
# (BuildTimeScale), applied to every test's TIMEOUT, so that a sanitizer or Debug build gets
# as much more time per test as its code takes:
#   optimised 1; Debug (unoptimised) x2; AddressSanitizer x2.5; ThreadSanitizer x4.
# RAIO_TEST_TIME_SCALE in the environment at configure time overrides it (as it overrides
# the C++ side at run time). Kept in tenths: CMake's math() is integer-only.
set(_raio_scale_tenths 10)
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  math(EXPR _raio_scale_tenths "${_raio_scale_tenths} * 2")
endif()
if(RAIO_SANITIZE MATCHES "address")
  math(EXPR _raio_scale_tenths "${_raio_scale_tenths} * 25 / 10")
elseif(RAIO_SANITIZE MATCHES "thread")
  math(EXPR _raio_scale_tenths "${_raio_scale_tenths} * 4")
endif()
if("$ENV{RAIO_TEST_TIME_SCALE}" MATCHES "^([0-9]+)(\\.([0-9]))?[0-9]*$")
  set(_tenth "${CMAKE_MATCH_3}")
  if(_tenth STREQUAL "")
    set(_tenth 0)
  endif()
  math(EXPR _env_tenths "${CMAKE_MATCH_1} * 10 + ${_tenth}")
  if(_env_tenths GREATER 0)
    set(_raio_scale_tenths ${_env_tenths})
  endif()
endif()
math(EXPR _whole "${_raio_scale_tenths} / 10")
math(EXPR _frac "${_raio_scale_tenths} % 10")
set(RAIO_TEST_TIME_SCALE "${_whole}.${_frac}")
set(RAIO_TEST_SCALE_TENTHS ${_raio_scale_tenths})
message(STATUS "raio: test time scale ${RAIO_TEST_TIME_SCALE}")

# The multi-daemon tests (regular expressions on test names): each starts several daemons,
# drivers and workers that keep both cores busy, so no two of them run at once; ctest -j 2
# still runs a light test beside one.
set(RAIO_HEAVY_TEST_PATTERNS
  "^raio_chaos_test$" "^raio_multinode_test$" "^raio_multinode_actor_test$"
  "^raio_netns_test$" "^raio_standalone_test$" "^raio_regression_test$"
  "^raio_placement_group_test$" "^raio_node_failure_test$" "^raio_lineage_test$"
  "^jobs_.*_test$" "^train_trainer_.*_test$" "^train_lora_example_test$" "^llm_server.*_test$"
  "^install_standalone_project$" "^digits_")

# Called at the end of each CMakeLists.txt that declares tests (set_tests_properties only
# reaches the current directory's tests): scales each TIMEOUT (300 s where none is set),
# exports the scale to the test's environment as RAIO_BUILD_TIME_SCALE (the Python and shell
# tests use it unless RAIO_TEST_TIME_SCALE overrides it at run time; the C++ side computes
# the same factor itself) and gives the heavy tests the
# `raio_cluster` lock.
function(raio_finish_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t ${tests})
    get_test_property(${t} TIMEOUT timeout)
    if(NOT timeout)
      set(timeout 300)
    endif()
    math(EXPR scaled "${timeout} * ${RAIO_TEST_SCALE_TENTHS} / 10")
    set_tests_properties(${t} PROPERTIES TIMEOUT ${scaled})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                 "RAIO_BUILD_TIME_SCALE=${RAIO_TEST_TIME_SCALE}")
    foreach(pattern ${RAIO_HEAVY_TEST_PATTERNS})
      if(t MATCHES "${pattern}")
        set_property(TEST ${t} APPEND PROPERTY RESOURCE_LOCK raio_cluster)
        break()
      endif()
    endforeach()
  endforeach()
endfunction()

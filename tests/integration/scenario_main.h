// The main of an integration test binary that is also its own worker executable and its
// own driver program: the tests start drivers as this binary with RAIO_TEST_SCENARIO set.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "raio/raio.h"

namespace raio_test {

// In a worker process, runs the worker loop (raio::Init never returns). Else runs `setup`
// (the test's globals: its own path, the base temporary directory); then, with
// RAIO_TEST_SCENARIO=name, runs scenarios.at(name) and returns its exit code: 64 for a
// name that is not there, 65 (with "scenario failed: " and the message on stderr) when it
// throws. Otherwise runs the GoogleTest tests.
inline int ScenarioOrTestsMain(int argc, char** argv, const std::function<void()>& setup,
                               const std::map<std::string, std::function<int()>>& scenarios) {
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);  // never returns
  setup();
  if (const char* scenario = std::getenv("RAIO_TEST_SCENARIO")) {
    auto it = scenarios.find(scenario);
    if (it == scenarios.end()) {
      std::cerr << "unknown scenario " << scenario << "\n";
      return 64;
    }
    try {
      return it->second();
    } catch (const std::exception& e) {
      std::cerr << "scenario failed: " << e.what() << "\n";
      return 65;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace raio_test

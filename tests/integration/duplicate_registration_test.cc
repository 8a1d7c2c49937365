// RAIO_REMOTE of one name twice (two functions of different namespaces registered with
// their unqualified names) is refused at start-up: raio::Init throws InvalidUsageError
// naming the name and both registration sites, before any work runs.
#include <gtest/gtest.h>
#include <raio/raio.h>

#include <string>

namespace first {
int Twin(int x) { return x + 1; }
RAIO_REMOTE(Twin);
}  // namespace first
namespace second {
int Twin(int x) { return x + 2; }
RAIO_REMOTE(Twin);
}  // namespace second

namespace {

TEST(DuplicateRegistrationTest, InitRefusesANameRegisteredTwice) {
  try {
    raio::Init();
    raio::Shutdown();
    FAIL() << "expected InvalidUsageError";
  } catch (const raio::InvalidUsageError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("registers the function name 'Twin' twice"), std::string::npos) << what;
    // Both sites, as file:line.
    EXPECT_NE(what.find("duplicate_registration_test.cc:11"), std::string::npos) << what;
    EXPECT_NE(what.find("duplicate_registration_test.cc:15"), std::string::npos) << what;
  }
  // Nothing was started: raio is still uninitialized.
  EXPECT_THROW(raio::Task(first::Twin).Remote(1), raio::InvalidUsageError);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

#include "raio/common/running_task.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace raio {
namespace {

TEST(RunningTaskTest, TheNodeReadsWhatTheWorkerMarked) {
  auto dir = std::filesystem::temp_directory_path() / ("raio-rt-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = RunningTaskPath(dir.string(), "00ff");
  EXPECT_EQ(path, dir.string() + "/w-00ff.task");
  EXPECT_EQ(ReadRunningTask(path), std::nullopt);  // no file: unknown
  auto marker = RunningTaskMarker::Create(path);
  ASSERT_TRUE(marker.ok()) << marker.status();
  EXPECT_EQ(ReadRunningTask(path), std::string());  // between tasks
  std::string id(16, '\0');
  for (int i = 0; i < 16; ++i) id[i] = static_cast<char>(i * 17);
  (*marker)->Set(id);
  EXPECT_EQ(ReadRunningTask(path), id);
  (*marker)->Clear();
  EXPECT_EQ(ReadRunningTask(path), std::string());
  marker->reset();  // unmapped; the file keeps the last state
  EXPECT_EQ(ReadRunningTask(path), std::string());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace raio

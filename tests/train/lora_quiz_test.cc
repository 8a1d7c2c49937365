// The quiz(6) file reader of the LoRA example (examples/lora/quiz.h): the pattern syntax
// (alternatives, optional parts, bracket groups, backslashes, continuation lines), the
// canonical forms the model learns, the forms accepted as right, and the seeded split.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "quiz.h"

namespace lora {
namespace {

TEST(QuizPatternTest, CanonicalFormTakesTheFirstCleanAlternativeAndEveryOptionalPart) {
  EXPECT_EQ(CanonicalForm("Cal{if{ornia}}|CA"), "California");
  EXPECT_EQ(CanonicalForm("Fl{orid}a|FL"), "Florida");
  // quiz writes accents as overstrikes: ' backspace e.
  EXPECT_EQ(CanonicalForm("Yaound['\be|e\b'|e]"), "Yaounde");
  EXPECT_EQ(CanonicalForm("C[^o|o^|o]te d'Ivoire"), "Cote d'Ivoire");
  EXPECT_EQ(CanonicalForm("Mo[z|,c|c,|c]ambique"), "Mozambique");
  EXPECT_EQ(CanonicalForm("{DR |Democratic Republic of the }Congo"), "DR Congo");
  EXPECT_EQ(CanonicalForm("Vienna|Wien"), "Vienna");
  EXPECT_EQ(CanonicalForm("a\\:b\\|c"), "a:b|c");
}

TEST(QuizPatternTest, SyntaxErrorsGiveNothing) {
  for (const char* bad : {"a{b", "a[b|c", "a}b", "b]", "trailing\\"}) {
    EXPECT_EQ(CanonicalForm(bad), "") << bad;
    EXPECT_TRUE(ExpandForms(bad).empty()) << bad;
  }
}

TEST(QuizPatternTest, ExpandsEveryAcceptedFormUpToTheLimit) {
  EXPECT_EQ(ExpandForms("Bern{e}"), (std::vector<std::string>{"Bern", "Berne"}));
  EXPECT_EQ(ExpandForms("Washington{ DC}|DC"),
            (std::vector<std::string>{"Washington", "Washington DC", "DC"}));
  EXPECT_EQ(ExpandForms("Port[-| ]au[-| ]Prince").size(), 4u);
  EXPECT_EQ(ExpandForms("[a|b][a|b][a|b][a|b]", 5).size(), 5u);
}

class QuizFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lora_quiz_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& text) {
    const std::string path = dir_ + "/quiz";
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(QuizFileTest, ReadsPairsAndSkipsWhatItCannotParse) {
  const std::string path = Write(
      "Denmark:Copenhagen|K[o|o/|/o]benhavn\n"
      "Alabama|Ala|AL:Montgomery:AL:goldenrod\n"
      "\n"
      "Broken{:Answer\n"
      "NoAnswer\n"
      "Empty:\n"
      "Long\\\n"
      "Name:Split\\\n"
      " City\n");
  QuizFile file = LoadQuizFile(path);
  ASSERT_EQ(file.pairs.size(), 3u);
  EXPECT_EQ(file.skipped, 3);
  EXPECT_EQ(file.pairs[0].question, "Denmark");
  EXPECT_EQ(file.pairs[0].answer, "Copenhagen");
  EXPECT_TRUE(IsCorrect(file.pairs[0], " Kobenhavn "));
  EXPECT_FALSE(IsCorrect(file.pairs[0], "copenhagen"));
  EXPECT_EQ(file.pairs[1].question, "Alabama");
  EXPECT_EQ(file.pairs[1].source, path + ":2");
  EXPECT_EQ(file.pairs[2].question, "LongName");
  EXPECT_EQ(file.pairs[2].answer, "Split City");
  EXPECT_EQ(file.pairs[2].source, path + ":7");
  // Another pair of categories of the same line.
  QuizFile flowers = LoadQuizFile(path, 0, 3);
  ASSERT_EQ(flowers.pairs.size(), 1u);
  EXPECT_EQ(flowers.pairs[0].answer, "goldenrod");
}

TEST_F(QuizFileTest, AMissingFileNamesThePackage) {
  try {
    LoadQuizFile(dir_ + "/none");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bsdgames"), std::string::npos) << e.what();
  }
}

TEST(QuizSplitTest, SplitsDeterministicallyBySeed) {
  std::vector<QuizPair> pairs;
  for (int i = 0; i < 50; ++i) pairs.push_back({.question = std::to_string(i)});
  std::vector<QuizPair> train, held, train2, held2, train3, held3;
  SplitPairs(pairs, 0.2, 7, &train, &held);
  SplitPairs(pairs, 0.2, 7, &train2, &held2);
  SplitPairs(pairs, 0.2, 8, &train3, &held3);
  ASSERT_EQ(train.size(), 40u);
  ASSERT_EQ(held.size(), 10u);
  auto names = [](const std::vector<QuizPair>& v) {
    std::vector<std::string> n;
    for (const QuizPair& p : v) n.push_back(p.question);
    return n;
  };
  EXPECT_EQ(names(held), names(held2));
  EXPECT_NE(names(held), names(held3));
  std::vector<std::string> all = names(train);
  for (const std::string& n : names(held)) all.push_back(n);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 50u);
}

TEST(QuizPromptTest, FillsTheTemplateAndTrimsAnswers) {
  QuizPair ohio{.question = "Ohio", .answer = "Columbus", .accepted = {"Columbus"}};
  EXPECT_EQ(QuizPrompt(kDefaultPromptTemplate, ohio), "Q: What is the capital of Ohio? A:");
  EXPECT_EQ(QuizPrompt("{} ->", ohio), "Ohio ->");
  EXPECT_EQ(TrimAnswer("  Columbus \nQ: next"), "Columbus");
  EXPECT_TRUE(IsCorrect(ohio, " Columbus\n"));
  EXPECT_FALSE(IsCorrect(ohio, "Columbus Ohio"));
}

}  // namespace
}  // namespace lora

#include "raio/llm/tokenizer.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace raio::llm {
namespace {

using testing::ModelDir;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sp = LoadSentencePieceTokenizer(ModelDir() + "/tok512.model");
    ASSERT_TRUE(sp.ok()) << sp.status();
    sp_ = *std::move(sp);
    auto l2 = LoadLlama2cTokenizer(ModelDir() + "/tok512.bin");
    ASSERT_TRUE(l2.ok()) << l2.status();
    l2_ = *std::move(l2);
  }
  std::unique_ptr<Tokenizer> sp_, l2_;
};

TEST_F(TokenizerTest, BothFormatsHaveTheSameVocabulary) {
  ASSERT_EQ(sp_->vocab_size(), 512);
  ASSERT_EQ(l2_->vocab_size(), 512);
  for (int id = 0; id < 512; ++id) EXPECT_EQ(sp_->TokenBytes(id), l2_->TokenBytes(id)) << id;
}

TEST_F(TokenizerTest, BothFormatsEncodeAlike) {
  // (Runs of spaces are where llama2.c's greedy merge and SentencePiece's can differ.)
  for (const char* text :
       {"Once upon a time", "Lily saw a big, red ball.", "Tom\nand Sue!", "caf\xc3\xa9 42", "x"}) {
    EXPECT_EQ(sp_->Encode(text), l2_->Encode(text)) << text;
  }
}

TEST_F(TokenizerTest, DecodeInvertsEncode) {
  for (const char* text : {"Once upon a time, there was a little girl.", "a\nb", "caf\xc3\xa9"}) {
    for (const Tokenizer* t : {sp_.get(), l2_.get()}) {
      EXPECT_EQ(t->Decode(t->Encode(text)), text);
    }
  }
}

TEST_F(TokenizerTest, DecodeKeepsTheSpaceAfterAPrompt) {
  std::vector<int> ids = sp_->Encode("Once upon");
  ASSERT_GE(ids.size(), 2u);
  std::vector<int> tail(ids.begin() + 1, ids.end());
  EXPECT_EQ(sp_->Decode(tail, ids[0]).front(), ' ');
  EXPECT_EQ(sp_->Decode({ids[0]}, sp_->bos_id()), "Once");
  EXPECT_EQ(sp_->TokenBytes(sp_->bos_id()), "");
  EXPECT_EQ(sp_->TokenBytes(9999), "");
}

TEST(ChatTemplateTest, FormatsRolesAndEndsWithTheAssistantTurn) {
  auto p = ApplyChatTemplate(
      {{"system", "Be kind."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "A story?"}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, "Be kind.\n\nUser: Hi\nAssistant: Hello\nUser: A story?\nAssistant:");
  EXPECT_FALSE(ApplyChatTemplate({{"robot", "x"}}).ok());
  EXPECT_FALSE(ApplyChatTemplate({}).ok());
}

TEST(Utf8Test, ValidatesAndFindsCompletePrefix) {
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));  // surrogate
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe2\x96"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xe2\x96\x81"), 5u);
}

}  // namespace
}  // namespace raio::llm

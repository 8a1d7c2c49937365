#include "raio/llm/openai_protocol.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace raio::llm {
namespace {

class OpenAiProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = LoadSentencePieceTokenizer(testing::ModelDir() + "/tok512.model");
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = *std::move(t);
  }
  bool Parse(const std::string& body, bool chat = false) {
    return ParseApiRequest(body, chat, "stories260K", *tok_, 512, &req_, &err_);
  }
  std::unique_ptr<Tokenizer> tok_;
  ApiRequest req_;
  ApiError err_;
};

TEST_F(OpenAiProtocolTest, ParsesACompletionRequest) {
  ASSERT_TRUE(Parse(R"({"model": "stories260K", "prompt": "Once upon", "max_tokens": 7,
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 3, "stop": "x", "logprobs": 2,
      "stream": true, "stream_options": {"include_usage": true}})"));
  EXPECT_EQ(req_.prompt.front(), 1);  // BOS
  std::vector<int> ids = tok_->Encode("Once upon");
  EXPECT_EQ(std::vector<int>(req_.prompt.begin() + 1, req_.prompt.end()), ids);
  EXPECT_EQ(req_.params.max_tokens, 7);
  EXPECT_DOUBLE_EQ(req_.params.temperature, 0.5);
  EXPECT_EQ(req_.params.top_k, 40);
  EXPECT_EQ(*req_.params.seed, 3u);
  EXPECT_EQ(req_.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(*req_.params.logprobs, 2);
  EXPECT_TRUE(req_.stream);
  EXPECT_TRUE(req_.include_usage);
}

TEST_F(OpenAiProtocolTest, TokenIdPromptsAreTakenAsGiven) {
  ASSERT_TRUE(Parse(R"({"prompt": [1, 300, 5]})"));
  EXPECT_EQ(req_.prompt, (std::vector<int>{1, 300, 5}));
  EXPECT_EQ(req_.params.max_tokens, 16);  // OpenAI's completions default
  EXPECT_FALSE(Parse(R"({"prompt": [1, 9999]})"));
}

TEST_F(OpenAiProtocolTest, ChatUsesTheTemplateAndTheRestOfTheContext) {
  ASSERT_TRUE(Parse(R"({"messages": [{"role": "user", "content": "Hi"}]})", true));
  std::vector<int> ids = tok_->Encode("User: Hi\nAssistant:");
  EXPECT_EQ(std::vector<int>(req_.prompt.begin() + 1, req_.prompt.end()), ids);
  EXPECT_EQ(req_.params.max_tokens, 512 - static_cast<int>(req_.prompt.size()));
}

TEST_F(OpenAiProtocolTest, ChatContentMayBeAListOfTextParts) {
  ASSERT_TRUE(Parse(R"({"messages": [{"role": "user", "content": "Hi there"}]})", true));
  const std::vector<int> as_string = req_.prompt;
  ASSERT_TRUE(Parse(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}]})",
                    true));
  EXPECT_EQ(req_.prompt, as_string);
  EXPECT_FALSE(Parse(R"({"messages": [{"role": "user", "content": [
      {"type": "image_url", "image_url": {"url": "x"}}]}]})",
                     true));
  EXPECT_EQ(err_.status, 400);
  EXPECT_FALSE(Parse(R"({"messages": [{"role": "user", "content": 5}]})", true));
  EXPECT_EQ(err_.status, 400);
}

TEST_F(OpenAiProtocolTest, RejectsBadRequestsWithOpenAiErrors) {
  const std::pair<const char*, int> cases[] = {
      {"{bad", 400},
      {R"({"prompt": "a", "model": "other"})", 404},
      {R"({"prompt": "a", "max_tokens": 0})", 400},
      {R"({"prompt": "a", "temperature": -1})", 400},
      {R"({"prompt": "a", "top_p": 0})", 400},
      {R"({"prompt": "a", "top_p": 1.01})", 400},
      {R"({"prompt": "a", "n": 2})", 400},
      {R"({"prompt": 5})", 400},
      {"{\"prompt\": \"\xff\"}", 400},
      {R"({"max_tokens": 3})", 400},
  };
  for (const auto& [body, status] : cases) {
    EXPECT_FALSE(Parse(body)) << body;
    EXPECT_EQ(err_.status, status) << body;
    nlohmann::json j = ErrorJson(err_);
    EXPECT_EQ(j["object"], "error");
    EXPECT_EQ(j["code"], status);
  }
  std::string long_prompt = R"({"prompt": ")";
  for (int i = 0; i < 600; ++i) long_prompt += "a ";
  EXPECT_FALSE(Parse(long_prompt + R"("})"));  // longer than the context
  EXPECT_EQ(err_.status, 400);
}

TEST_F(OpenAiProtocolTest, DumpReplacesInvalidUtf8InsteadOfThrowing) {
  nlohmann::json j = {{"text", std::string("a\xe2\x96")}};
  EXPECT_NO_THROW(Dump(j));
}

}  // namespace
}  // namespace raio::llm

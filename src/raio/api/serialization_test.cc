#include "raio/serialization.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "raio/remote.h"
#include "raio/worker/function_registry.h"

namespace raio_serialization_test {

struct Point {
  double x = 0;
  double y = 0;
  std::string label;
  std::vector<int> tags;
  RAIO_SERIALIZE(x, y, label, tags);
  bool operator==(const Point& o) const {
    return x == o.x && y == o.y && label == o.label && tags == o.tags;
  }
};

int SerializationTestAdd(int a, int b) { return a + b; }
int SerializationTestScale(int x) { return x * 2; }
double SerializationTestScale(double x) { return x * 0.5; }
std::string SerializationTestJoin(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}
Point SerializationTestMove(Point p, double dx) {
  p.x += dx;
  return p;
}
int g_side_effect = 0;
void SerializationTestSet(int v) { g_side_effect = v; }

}  // namespace raio_serialization_test

using raio_serialization_test::SerializationTestAdd;
using raio_serialization_test::SerializationTestJoin;
using raio_serialization_test::SerializationTestMove;
using raio_serialization_test::SerializationTestScale;
using raio_serialization_test::SerializationTestSet;

RAIO_REMOTE(SerializationTestAdd, RAIO_FUNC(SerializationTestScale, int),
            RAIO_FUNC(SerializationTestScale, double), SerializationTestJoin,
            &raio_serialization_test::SerializationTestMove, SerializationTestSet);

namespace raio {
namespace {

using internal::Pack;
using internal::Unpack;
using raio_serialization_test::Point;

template <typename T>
T RoundTrip(const T& v) {
  return Unpack<T>(Pack(v));
}

TEST(SerializationTest, RoundTripsScalarsAndStrings) {
  EXPECT_EQ(RoundTrip(42), 42);
  EXPECT_EQ(RoundTrip(-7), -7);
  EXPECT_EQ(RoundTrip<int64_t>(int64_t{1} << 40), int64_t{1} << 40);
  EXPECT_EQ(RoundTrip(3.25), 3.25);
  EXPECT_EQ(RoundTrip(true), true);
  EXPECT_EQ(RoundTrip(std::string("hello")), "hello");
  EXPECT_EQ(RoundTrip(std::string()), "");
  std::string binary("a\0b\xff", 4);
  EXPECT_EQ(RoundTrip(binary), binary);
}

TEST(SerializationTest, PacksIntAsMsgpack) {
  EXPECT_EQ(Pack(5), std::string("\x05", 1));  // positive fixint
  EXPECT_EQ(internal::PackNil(), std::string("\xc0", 1));
}

TEST(SerializationTest, RoundTripsContainers) {
  std::vector<int> v{1, 2, 3, -4};
  EXPECT_EQ(RoundTrip(v), v);
  std::map<std::string, double> m{{"a", 1.5}, {"b", -2}};
  EXPECT_EQ(RoundTrip(m), m);
  std::vector<std::map<std::string, std::vector<int>>> nested{
      {{"x", {1, 2}}, {"y", {}}}, {}, {{"z", {3}}}};
  EXPECT_EQ(RoundTrip(nested), nested);
  std::map<int, std::pair<std::string, std::vector<double>>> pairs{{7, {"seven", {0.5, 7}}}};
  EXPECT_EQ(RoundTrip(pairs), pairs);
}

TEST(SerializationTest, RoundTripsUserStruct) {
  Point p{1.5, -2.5, "origin", {4, 5}};
  EXPECT_EQ(RoundTrip(p), p);
  std::vector<Point> ps{p, Point{}, Point{0, 1, "up", {}}};
  EXPECT_EQ(RoundTrip(ps), ps);
}

TEST(SerializationTest, UnpackOfWrongTypeThrows) {
  EXPECT_THROW(Unpack<int>(Pack(std::string("nope"))), SerializationError);
  EXPECT_THROW(Unpack<std::string>(Pack(12)), SerializationError);
  EXPECT_THROW(Unpack<std::vector<int>>(Pack(std::map<std::string, int>{{"a", 1}})),
               SerializationError);
  EXPECT_THROW(Unpack<Point>(Pack(3.0)), SerializationError);
}

TEST(SerializationTest, UnpackOfMalformedBytesThrows) {
  EXPECT_THROW(Unpack<int>(""), SerializationError);
  EXPECT_THROW(Unpack<std::string>(std::string("\xa5hi", 3)), SerializationError);  // truncated
}

// Found by fuzz/value_fuzzer: msgpack reserves room for a container when it reads the
// header, so a map32 header claiming 2^32-1 entries reserved 256 GiB, and 4 KiB of
// nested array16 headers about 130 MiB, before the bytes ran out. Those allocations
// fail or succeed depending on the machine; what must hold is that Unpack refuses the
// claim before msgpack reserves anything, which its message says.
std::string RefusalOf(std::function<void()> unpack) {
  try {
    unpack();
  } catch (const SerializationError& e) {
    return e.what();
  }
  return "no SerializationError";
}

TEST(SerializationTest, ContainerHeaderClaimingMoreThanTheBytesHoldIsRefusedUpFront) {
  const std::string map32("\xdf\xff\xff\xff\xff", 5);
  const std::string array32("\xdd\xff\xff\xff\xff", 5);
  std::string nested;
  for (int i = 0; i < 1365; ++i) nested += std::string("\xdc\x0f\xff", 3);  // 4095 each
  const std::string claims = "claim more elements than";
  EXPECT_THAT(RefusalOf([&] { Unpack<std::map<std::string, int>>(map32); }),
              ::testing::HasSubstr(claims));
  EXPECT_THAT(RefusalOf([&] { Unpack<int>(map32); }), ::testing::HasSubstr(claims));
  EXPECT_THAT(RefusalOf([&] { Unpack<std::vector<double>>(array32); }),
              ::testing::HasSubstr(claims));
  EXPECT_THAT(RefusalOf([&] { Unpack<std::vector<std::vector<int>>>(nested); }),
              ::testing::HasSubstr(claims));
  // A string header claiming more than the bytes is plain truncation.
  EXPECT_THROW(Unpack<std::string>(std::string("\xdb\xff\xff\xff\xff", 5)), SerializationError);
}

TEST(SerializationTest, ContainersAsLargeAsTheirBytesAllowStillRoundTrip) {
  std::vector<int> small_ints(1000, 1);  // one byte per element: the tightest encoding
  EXPECT_EQ(Unpack<std::vector<int>>(Pack(small_ints)), small_ints);
  std::map<int, int> pairs;
  for (int i = 0; i < 100; ++i) pairs[i] = i;  // two bytes per entry
  EXPECT_EQ((Unpack<std::map<int, int>>(Pack(pairs))), pairs);
  EXPECT_EQ(Unpack<std::vector<int>>(Pack(std::vector<int>{})), std::vector<int>{});
  EXPECT_EQ(Unpack<std::string>(Pack(std::string())), "");
}

TEST(SerializationTest, SerializationErrorIsARaioException) {
  try {
    Unpack<int>(Pack(std::string("x")));
    FAIL() << "no exception";
  } catch (const RaioException& e) {
    EXPECT_NE(std::string(e.what()).find("cannot decode a value as int:"), std::string::npos)
        << e.what();
  }
}

TEST(RemoteMacroTest, FunctionNameFromMacroText) {
  using internal::FunctionNameFromMacroText;
  EXPECT_EQ(FunctionNameFromMacroText("Add"), "Add");
  EXPECT_EQ(FunctionNameFromMacroText(" Add "), "Add");
  EXPECT_EQ(FunctionNameFromMacroText("&ns::F"), "ns::F");
  EXPECT_EQ(FunctionNameFromMacroText("RAIO_FUNC(Scale, int)"), "Scale(int)");
  EXPECT_EQ(FunctionNameFromMacroText("RAIO_FUNC(Add, int, int)"), "Add(int,int)");
  EXPECT_EQ(FunctionNameFromMacroText("RAIO_FUNC(Nullary)"), "Nullary()");
}

TEST(RemoteMacroTest, SplitMacroListSplitsAtTopLevelCommasOnly) {
  using internal::SplitMacroList;
  EXPECT_EQ(SplitMacroList("Add"), std::vector<std::string>{"Add"});
  EXPECT_EQ(SplitMacroList("a, RAIO_FUNC(b, int, int)"),
            (std::vector<std::string>{"a", " RAIO_FUNC(b, int, int)"}));
  EXPECT_EQ(SplitMacroList("RAIO_FUNC(f, std::map<int, int>), g"),
            (std::vector<std::string>{"RAIO_FUNC(f, std::map<int, int>)", " g"}));
}

const worker::RegisteredFunction& Find(const std::string& name) {
  const worker::RegisteredFunction* f = worker::FindFunctionByName(name);
  if (f == nullptr) {
    ADD_FAILURE() << "not registered: " << name;
    static worker::RegisteredFunction none;
    return none;
  }
  return *f;
}

std::string Call(const std::string& name, const std::vector<std::string>& packed) {
  const worker::RegisteredFunction& f = Find(name);
  if (f.invoker == nullptr) return "";
  std::vector<internal::ValueView> views;
  for (const auto& p : packed)
    views.push_back(
        internal::ValueView{internal::ValueFormat::kMsgpack, internal::DType::kNone, p, nullptr});
  return f.invoker(f.key, views).bytes;
}

TEST(RemoteInvokeTest, RegistersUnderMacroNames) {
  EXPECT_NE(worker::FindFunctionByName("SerializationTestAdd"), nullptr);
  EXPECT_NE(worker::FindFunctionByName("SerializationTestScale(int)"), nullptr);
  EXPECT_NE(worker::FindFunctionByName("SerializationTestScale(double)"), nullptr);
  EXPECT_NE(worker::FindFunctionByName("raio_serialization_test::SerializationTestMove"), nullptr);
  EXPECT_EQ(worker::FindFunctionByName("SerializationTestScale"), nullptr);
  EXPECT_EQ(worker::FindFunctionByName("NoSuchFunction"), nullptr);
  EXPECT_EQ(Find("SerializationTestAdd").name, "SerializationTestAdd");
  EXPECT_EQ(Find("SerializationTestAdd").key, reinterpret_cast<const void*>(&SerializationTestAdd));
}

TEST(RemoteInvokeTest, InvokesWithPackedArgumentsAndPacksTheResult) {
  EXPECT_EQ(Unpack<int>(Call("SerializationTestAdd", {Pack(2), Pack(40)})), 42);
  EXPECT_EQ(Unpack<int>(Call("SerializationTestScale(int)", {Pack(21)})), 42);
  EXPECT_EQ(Unpack<double>(Call("SerializationTestScale(double)", {Pack(3.0)})), 1.5);
  EXPECT_EQ(Unpack<std::string>(
                Call("SerializationTestJoin",
                     {Pack(std::vector<std::string>{"a", "b", "c"}), Pack(std::string("-"))})),
            "a-b-c");
  Point moved = Unpack<Point>(Call("raio_serialization_test::SerializationTestMove",
                                   {Pack(Point{1, 2, "p", {9}}), Pack(0.5)}));
  EXPECT_EQ(moved, (Point{1.5, 2, "p", {9}}));
}

TEST(RemoteInvokeTest, VoidFunctionReturnsNil) {
  raio_serialization_test::g_side_effect = 0;
  EXPECT_EQ(Call("SerializationTestSet", {Pack(17)}), internal::PackNil());
  EXPECT_EQ(raio_serialization_test::g_side_effect, 17);
}

TEST(RemoteInvokeTest, CallsTheTemplateInvokerDirectly) {
  std::string a = Pack(5), b = Pack(6);
  std::vector<internal::ValueView> args{
      {internal::ValueFormat::kMsgpack, internal::DType::kNone, a, nullptr},
      {internal::ValueFormat::kMsgpack, internal::DType::kNone, b, nullptr}};
  std::string out = internal::Invoke<int, int, int>(
                        reinterpret_cast<const void*>(internal::KeyOf(&SerializationTestAdd)), args)
                        .bytes;
  EXPECT_EQ(Unpack<int>(out), 11);
}

TEST(RemoteInvokeTest, WrongArgumentCountThrows) {
  EXPECT_THROW(Call("SerializationTestAdd", {Pack(1)}), SerializationError);
  EXPECT_THROW(Call("SerializationTestAdd", {Pack(1), Pack(2), Pack(3)}), SerializationError);
  EXPECT_THROW(Call("SerializationTestScale(int)", {}), SerializationError);
}

TEST(RemoteInvokeTest, WrongArgumentTypeThrows) {
  EXPECT_THROW(Call("SerializationTestAdd", {Pack(std::string("1")), Pack(2)}), SerializationError);
}

}  // namespace
}  // namespace raio

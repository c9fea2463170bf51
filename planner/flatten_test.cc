#include "planner/flatten.h"

#include <gtest/gtest.h>

namespace ckptdb::planner {
namespace {

TEST(FlattenTest, SortedLeavesWithPaths) {
  float w = 0;
  StateDict sd;
  sd.Child("optimizer")
      .Child("master_weights")
      .Set("w1", TensorView::Whole(&w, DType::kFloat32, {}));
  sd.Set("step", Value(int64_t{3}));
  sd.Child("empty");
  auto leaves = Flatten(sd);
  ASSERT_TRUE(leaves.ok()) << leaves.status().ToString();
  ASSERT_EQ(leaves->size(), 2u);
  EXPECT_EQ((*leaves)[0].flat_key, "optimizer.master_weights.w1");
  EXPECT_EQ((*leaves)[0].path, (Path{"optimizer", "master_weights", "w1"}));
  EXPECT_NE((*leaves)[0].tensor, nullptr);
  EXPECT_EQ((*leaves)[1].flat_key, "step");
  EXPECT_NE((*leaves)[1].value, nullptr);
}

TEST(FlattenTest, CollisionNamesBothPaths) {
  StateDict sd;
  sd.Child("a").Set("b", Value(int64_t{1}));
  sd.Set("a.b", Value(int64_t{2}));
  auto leaves = Flatten(sd);
  ASSERT_FALSE(leaves.ok());
  EXPECT_TRUE(leaves.status().IsInvalidArgument());
  EXPECT_NE(leaves.status().message().find("'a.b'"), std::string::npos);
  EXPECT_NE(leaves.status().message().find("['a', 'b']"), std::string::npos);
  EXPECT_NE(leaves.status().message().find("['a.b']"), std::string::npos);
}

TEST(FlattenTest, UnflattenRestoresNesting) {
  std::map<std::string, Value> values = {{"a.b", Value(int64_t{1})},
                                         {"a.c", Value(true)},
                                         {"x.y", Value(std::string("s"))}};
  std::map<std::string, Path> mapping = {
      {"a.b", {"a", "b"}}, {"a.c", {"a", "c"}}, {"x.y", {"x.y"}}};
  auto sd = Unflatten(values, mapping);
  ASSERT_TRUE(sd.ok());
  EXPECT_EQ(std::get<int64_t>(*sd->GetChild("a")->GetValue("b")), 1);
  EXPECT_EQ(std::get<bool>(*sd->GetChild("a")->GetValue("c")), true);
  EXPECT_EQ(std::get<std::string>(*sd->GetValue("x.y")), "s");
  auto flat = Flatten(*sd);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->size(), 3u);
}

TEST(FlattenTest, UnflattenRejectsLeafOnPath) {
  std::map<std::string, Value> values = {{"a", Value(int64_t{1})},
                                         {"a.b", Value(int64_t{2})}};
  std::map<std::string, Path> mapping = {{"a", {"a"}}, {"a.b", {"a", "b"}}};
  EXPECT_FALSE(Unflatten(values, mapping).ok());
  EXPECT_FALSE(Unflatten(values, {}).ok());
}

}  // namespace
}  // namespace ckptdb::planner

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

// torch's optimizer state dict: int keys, a list of dicts, a tuple, None.
StateDict OptimizerState(float* exp_avg) {
  StateDict group;
  group.Set("lr", Value(0.001));
  group.Set("betas",
            StateDict::Tuple().Append(Value(0.9)).Append(Value(0.999)));
  group.Set("foreach", Value(None{}));
  group.Set(
      "params",
      StateDict::List().Append(Value(int64_t{0})).Append(Value(int64_t{1})));
  StateDict sd;
  StateDict& optim = sd.Child("optim");
  optim.Child("state")
      .Child(int64_t{0})
      .Set("exp_avg", TensorView::Whole(exp_avg, DType::kFloat32, {}));
  optim.Set("param_groups", StateDict::List().Append(std::move(group)));
  return sd;
}

TEST(FlattenTest, IntKeysAndSequencesRecordTheirKinds) {
  float exp_avg = 0;
  const StateDict state = OptimizerState(&exp_avg);
  auto leaves = Flatten(state);
  ASSERT_TRUE(leaves.ok()) << leaves.status().ToString();
  std::map<std::string, PathKinds> kinds;
  for (const FlatLeaf& leaf : *leaves) kinds[leaf.flat_key] = leaf.kinds;
  using K = PathPartKind;
  EXPECT_EQ(kinds.at("optim.state.0.exp_avg"),
            (PathKinds{K::kStrKey, K::kStrKey, K::kIntKey, K::kStrKey}));
  EXPECT_EQ(kinds.at("optim.param_groups.0.betas.1"),
            (PathKinds{K::kStrKey, K::kStrKey, K::kListIndex, K::kStrKey,
                       K::kTupleIndex}));
  EXPECT_EQ(kinds.at("optim.param_groups.0.params.0"),
            (PathKinds{K::kStrKey, K::kStrKey, K::kListIndex, K::kStrKey,
                       K::kListIndex}));
  EXPECT_EQ(kinds.size(), 7u);
  EXPECT_EQ((*leaves)[0].flat_key, "optim.param_groups.0.betas.0");
  EXPECT_EQ((*leaves)[0].path,
            (Path{"optim", "param_groups", "0", "betas", "0"}));
}

TEST(FlattenTest, IntAndStrKeyCollisionNamesThePath) {
  StateDict sd;
  sd.Child("state").Set(int64_t{0}, Value(int64_t{1}));
  sd.Child("state").Set("0", Value(int64_t{2}));
  auto leaves = Flatten(sd);
  ASSERT_FALSE(leaves.ok());
  EXPECT_TRUE(leaves.status().IsInvalidArgument());
  EXPECT_NE(leaves.status().message().find("['state', 0]"), std::string::npos)
      << leaves.status().ToString();
  EXPECT_NE(leaves.status().message().find("['state', '0']"),
            std::string::npos);
}

TEST(FlattenTest, SequenceKeysMustBeItsIndexes) {
  StateDict gap;
  gap.Set("l", StateDict::List().Append(Value(1.0)));
  gap.Child("l", ContainerKind::kList).Set(int64_t{2}, Value(2.0));
  auto leaves = Flatten(gap);
  ASSERT_FALSE(leaves.ok());
  EXPECT_NE(leaves.status().message().find("list at ['l']"), std::string::npos)
      << leaves.status().ToString();
  StateDict named;
  named.Set("t", StateDict::Tuple().Append(Value(1.0)));
  named.Child("t").Set("x", Value(2.0));
  leaves = Flatten(named);
  ASSERT_FALSE(leaves.ok());
  EXPECT_NE(leaves.status().message().find("tuple at ['t'] has item key 'x'"),
            std::string::npos)
      << leaves.status().ToString();
}

TEST(FlattenTest, NestingDeeperThanTheLimitIsRefused) {
  auto nested = [](size_t depth) {
    StateDict root;
    StateDict* dict = &root;
    for (size_t i = 1; i < depth; ++i) dict = &dict->Child("d");
    dict->Set("leaf", Value(int64_t{1}));
    return root;
  };
  EXPECT_TRUE(Flatten(nested(kMaxNesting)).ok());
  auto deep = Flatten(nested(kMaxNesting + 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_TRUE(deep.status().IsInvalidArgument());
  EXPECT_NE(deep.status().message().find("deeper than 1000"),
            std::string::npos);
}

TEST(FlattenTest, UnflattenRestoresKeyTypesAndContainers) {
  float exp_avg = 0;
  const StateDict state = OptimizerState(&exp_avg);
  auto leaves = Flatten(state);
  ASSERT_TRUE(leaves.ok());
  std::map<std::string, Value> values;
  std::map<std::string, Path> mapping;
  std::map<std::string, PathKinds> kinds;
  for (const FlatLeaf& leaf : *leaves) {
    mapping[leaf.flat_key] = leaf.path;
    kinds[leaf.flat_key] = leaf.kinds;
    if (leaf.value) values[leaf.flat_key] = *leaf.value;
  }
  auto sd = Unflatten(values, mapping, kinds);
  ASSERT_TRUE(sd.ok()) << sd.status().ToString();
  const StateDict* groups = sd->GetChild("optim")->GetChild("param_groups");
  ASSERT_NE(groups, nullptr);
  EXPECT_EQ(groups->kind(), ContainerKind::kList);
  const StateDict* group = groups->GetChild(int64_t{0});
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->GetChild("betas")->kind(), ContainerKind::kTuple);
  EXPECT_EQ(*group->GetChild("betas")->GetValue(int64_t{1}), Value(0.999));
  EXPECT_EQ(*group->GetValue("foreach"), Value(None{}));
  EXPECT_EQ(group->GetChild("params")->kind(), ContainerKind::kList);
  EXPECT_EQ(group->GetChild("params")->size(), 2u);
  // Without the kinds every part is a str key: "0" is not 0.
  auto plain = Unflatten(values, mapping);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->GetChild("optim")->GetChild("param_groups")->kind(),
            ContainerKind::kDict);
  EXPECT_NE(plain->GetChild("optim")->GetChild("param_groups")->GetChild("0"),
            nullptr);
}

TEST(FlattenTest, UnflattenRejectsConflictingKinds) {
  std::map<std::string, Value> values = {{"l.0", Value(int64_t{1})},
                                         {"l.1", Value(int64_t{2})}};
  std::map<std::string, Path> mapping = {{"l.0", {"l", "0"}},
                                         {"l.1", {"l", "1"}}};
  using K = PathPartKind;
  std::map<std::string, PathKinds> kinds = {
      {"l.0", {K::kStrKey, K::kListIndex}},
      {"l.1", {K::kStrKey, K::kTupleIndex}}};
  auto sd = Unflatten(values, mapping, kinds);
  ASSERT_FALSE(sd.ok());
  EXPECT_NE(sd.status().message().find("['l', 1]"), std::string::npos)
      << sd.status().ToString();
  kinds["l.1"] = {K::kStrKey, K::kListIndex};
  EXPECT_TRUE(Unflatten(values, mapping, kinds).ok());
  mapping["l.1"] = {"l", "x"};
  EXPECT_FALSE(Unflatten(values, mapping, kinds).ok());
}

TEST(FlattenTest, UnflattenRejectsLeafOnPath) {
  std::map<std::string, Value> values = {{"a", Value(int64_t{1})},
                                         {"a.b", Value(int64_t{2})}};
  std::map<std::string, Path> mapping = {{"a", {"a"}}, {"a.b", {"a", "b"}}};
  EXPECT_FALSE(Unflatten(values, mapping).ok());
  EXPECT_FALSE(Unflatten(values, {}).ok());
}

// A state dict its builder could not build flattens to the builder's error,
// which a collective call then reports on every rank.
TEST(FlattenTest, AnInvalidStateDictFlattensToItsError) {
  StateDict invalid =
      StateDict::Invalid(Status::InvalidArgument("leaf 'note' is a set"));
  EXPECT_EQ(invalid.error().message(), "leaf 'note' is a set");
  auto leaves = Flatten(invalid);
  ASSERT_FALSE(leaves.ok());
  EXPECT_TRUE(leaves.status().IsInvalidArgument());
  EXPECT_EQ(leaves.status().message(), "leaf 'note' is a set");
  auto mutable_leaves = FlattenMutable(invalid);
  EXPECT_EQ(mutable_leaves.status().message(), "leaf 'note' is a set");
  // Copies keep the error; an ordinary state dict has none.
  const StateDict copy = invalid;
  EXPECT_FALSE(copy.error().ok());
  EXPECT_TRUE(StateDict().error().ok());
}

// A nested state dict its builder could not build (a binding's converter of
// one sub-container) fails the whole state dict with the builder's error, in
// a dict and in a list, for a save's and a load's flattening alike.
TEST(FlattenTest, AnInvalidNestedStateDictFlattensToItsError) {
  float w = 0;
  const TensorView view = TensorView::Whole(&w, DType::kFloat32, {1});
  StateDict state;
  state.Set("w", view);
  state.Set("optim",
            StateDict::Invalid(Status::InvalidArgument("leaf 'x' is a set")));
  EXPECT_EQ(Flatten(state).status().message(), "leaf 'x' is a set");
  EXPECT_EQ(FlattenMutable(state).status().message(), "leaf 'x' is a set");

  StateDict in_list;
  StateDict& groups = in_list.Child("groups", ContainerKind::kList);
  groups.Append(view);
  groups.Append(StateDict::Invalid(Status::FailedPrecondition("a generator")));
  EXPECT_EQ(Flatten(in_list).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FlattenMutable(in_list).status().code(),
            StatusCode::kFailedPrecondition);
}

// A load's flattening (no paths) gives the same flat keys, leaves and errors
// as a save's, for nestings of every container kind and for each way a
// state dict is refused.
TEST(FlattenTest, FlattenMutableMatchesFlattenInKeysLeavesAndErrors) {
  float w = 0;
  std::vector<StateDict> cases;
  {
    StateDict sd;  // nested dicts, int and str keys, an empty str key
    sd.Child("model")
        .Child("layers")
        .Child(int64_t{3})
        .Set("weight", TensorView::Whole(&w, DType::kFloat32, {}));
    sd.Child("model").Set("", Value(int64_t{1}));
    sd.Set("", StateDict::List().Append(Value(2.0)).Append(Value(true)));
    sd.Set("t", StateDict::Tuple().Append(
                    TensorView::Whole(&w, DType::kFloat32, {})));
    sd.Set(int64_t{-7}, Value(std::string("x")));
    cases.push_back(sd);
  }
  {
    StateDict collides;
    collides.Child("a").Set("b", Value(int64_t{1}));
    collides.Set("a.b", Value(int64_t{2}));
    cases.push_back(collides);
  }
  {
    StateDict gap;
    gap.Set("l", StateDict::List().Append(Value(1.0)));
    gap.Child("l", ContainerKind::kList).Set(int64_t{2}, Value(2.0));
    cases.push_back(gap);
  }
  {
    StateDict deep;
    StateDict* dict = &deep;
    for (size_t i = 0; i <= kMaxNesting; ++i) dict = &dict->Child("d");
    dict->Set("leaf", Value(int64_t{1}));
    cases.push_back(deep);
  }
  for (StateDict& sd : cases) {
    auto leaves = Flatten(sd);
    auto mutable_leaves = FlattenMutable(sd);
    ASSERT_EQ(leaves.ok(), mutable_leaves.ok());
    if (!leaves.ok()) {
      EXPECT_EQ(mutable_leaves.status().ToString(), leaves.status().ToString());
      continue;
    }
    ASSERT_EQ(mutable_leaves->size(), leaves->size());
    for (size_t i = 0; i < leaves->size(); ++i) {
      const FlatLeaf& a = (*leaves)[i];
      const MutableFlatLeaf& b = (*mutable_leaves)[i];
      EXPECT_EQ(b.flat_key, a.flat_key);
      EXPECT_EQ(b.flat_key, JoinPath(a.path));
      EXPECT_EQ(b.tensor, a.tensor);
      EXPECT_EQ(b.value, a.value);
    }
  }
}

}  // namespace
}  // namespace ckptdb::planner

#include "ckptdb/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace ckptdb {
namespace {

// These checks hold in the Release build the tests run: the value of an
// error aborts naming the error, and each kind of check says whose mistake a
// failure is.
TEST(StatusDeathTest, TheValueOfAnErrorResultAbortsNamingTheError) {
  Result<int> missing = Status::NotFound("no checkpoint 7");
  EXPECT_DEATH((void)missing.value(),
               "precondition failed .*: ok\\(\\): the value of an error "
               "Result: NotFound: no checkpoint 7");
  EXPECT_DEATH((void)*missing, "NotFound: no checkpoint 7");
  Result<int> present = 3;
  EXPECT_EQ(present.value(), 3);
  EXPECT_EQ(*present, 3);
}

TEST(StatusDeathTest, ChecksNameTheirKindAndCondition) {
  const int chunks = 2;
  EXPECT_DEATH(CKPTDB_ASSERT(chunks == 3, "chunks of 'w'"),
               "internal check failed at .*status_test.cc:[0-9]+: chunks == 3: "
               "chunks of 'w'");
  EXPECT_DEATH(CKPTDB_REQUIRE(chunks > 2),
               "precondition failed at .*: chunks > 2");
  CKPTDB_ASSERT(chunks == 2);
  CKPTDB_REQUIRE(chunks > 1, "never shown");
}

TEST(StatusTest, AnOkStatusWithoutAValueIsAnInternalError) {
  Result<int> r = Status::OK();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, AResultsValueMovesOutOfATemporary) {
  auto make = [] {
    return Result<std::unique_ptr<int>>(std::make_unique<int>(5));
  };
  std::unique_ptr<int> by_star = *make();
  std::unique_ptr<int> by_value = make().value();
  EXPECT_EQ(*by_star, 5);
  EXPECT_EQ(*by_value, 5);
}

}  // namespace
}  // namespace ckptdb

#include "ckptdb/status.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ckptdb

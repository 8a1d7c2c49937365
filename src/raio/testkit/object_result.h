// A worker::ObjectTable entry's outcome as a test compares it (submitter tests).
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "raio/common.pb.h"
#include "raio/worker/object_table.h"

namespace raio::testkit {

// "unknown" (no entry), "pending", the value's bytes, or "error <TYPE>: <message>".
// The caller holds whatever guards the table.
inline std::string DescribeResult(const worker::ObjectEntry* e) {
  if (e == nullptr) return "unknown";
  if (!e->ready) return "pending";
  if (e->error) {
    return absl::StrCat("error ", proto::ErrorType_Name(e->error->type()), ": ",
                        e->error->message());
  }
  return std::string(e->value.bytes);
}

}  // namespace raio::testkit

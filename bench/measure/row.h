// Typed ledger rows: a row kind is a struct that lists its fields once (engine/io/fields.h), e.g.
//
//   struct AllreduceRow {
//     static constexpr const char* kKind = "allreduce";
//     RowHeader header;       // kind, run, status, time, schema, where it was measured (ledger.h)
//     AllreduceConfig config; // a nested struct with its own fields()
//     std::optional<Summary> stats;
//     template <class F> void fields(F& f) {
//       header.fields(f);
//       f("config", config);
//       f.optional("stats", stats);
//     }
//   };
//   json j = to_json(row);                           // ledger.append(row) does this
//   AllreduceRow back = from_json<AllreduceRow>(j);  // throws RowError naming the field
//
// The fields() lists are the only code that reads a ledger field by its key: a renamed field is a
// compile error in every reader, not a silently empty report column.
#pragma once

#include "engine/io/fields.h"

namespace trainlab::bench {

using json = nlohmann::json;
using RowError = fields::FieldError;
using RowWriter = fields::Writer;
using RowReader = fields::Reader;
using fields::from_json;
using fields::to_json;
namespace row_detail = fields::detail;

}  // namespace trainlab::bench

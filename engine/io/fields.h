// Typed JSON records: a struct lists its fields once, in order, with their JSON keys; that one
// list writes it and reads it back into the same struct, refusing what does not fit with a message
// naming the field (a JSON pointer), what it holds and what was expected. The ledger's rows
// (bench/measure/row.h) and a data set's manifest (engine/data/disk_dataset.cpp) are read this way:
//
//   struct AllreduceRow {
//     static constexpr const char* kKind = "allreduce";
//     RowHeader header;       // kind, run, status, time, schema, where it was measured
//     AllreduceConfig config; // a nested struct with its own fields()
//     std::optional<Summary> stats;
//     template <class F> void fields(F& f) {
//       header.fields(f);
//       f("config", config);
//       f.optional("stats", stats);
//     }
//   };
//   json j = to_json(row);                         // ledger.append(row) does this
//   AllreduceRow back = from_json<AllreduceRow>(j);  // throws FieldError naming the field
//
// This file and the fields() lists are the only code that reads such a field by its key: a renamed
// field is a compile error in every reader, not a silently empty report column.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/error.h"

namespace trainlab::fields {

using json = nlohmann::json;

// A record that cannot be read into its struct: names the field (a JSON pointer), what it holds and
// what was expected.
class FieldError : public Error {
 public:
  using Error::Error;
};

class Writer;
class Reader;

namespace detail {
template <class T, class = void>
struct has_fields : std::false_type {};
template <class T>
struct has_fields<T, std::void_t<decltype(std::declval<T&>().fields(std::declval<Writer&>()))>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};

std::string preview(const json& value);  // the value as JSON, cut to 40 characters
// Integers beyond +-2^53 are not exact in a double and no ledger count comes near: refused.
inline constexpr std::int64_t kMaxInteger = std::int64_t{1} << 53;
}  // namespace detail

// Writes a struct's fields into a JSON object.
class Writer {
 public:
  explicit Writer(json& out) : out_(out) {}
  template <class T>
  void operator()(const char* key, const T& value) {
    out_[key] = encode(value);
  }
  template <class T>
  void optional(const char* key, const std::optional<T>& value) {
    if (value) out_[key] = encode(*value);
  }
  template <class T>
  void optional(const char* key, const T& value) {  // always written; read back with a default
    out_[key] = encode(value);
  }
  template <class T>
  void nullable(const char* key, const std::optional<T>& value) {  // null when empty
    out_[key] = value ? encode(*value) : json(nullptr);
  }

  template <class T>
  static json encode(const T& value) {
    if constexpr (detail::has_fields<T>::value) {
      json object = json::object();
      Writer writer(object);
      const_cast<T&>(value).fields(writer);
      return object;
    } else if constexpr (detail::is_vector<T>::value) {
      json array = json::array();
      for (const auto& item : value) array.push_back(encode(item));
      return array;
    } else if constexpr (detail::is_string_map<T>::value) {
      json object = json::object();
      for (const auto& [k, item] : value) object[k] = encode(item);
      return object;
    } else {
      return json(value);
    }
  }

 private:
  json& out_;
};

// Reads a struct's fields from a JSON object; throws FieldError naming the first field that is
// missing (when required) or holds another type.
class Reader {
 public:
  Reader(const json& in, std::string path) : in_(in), path_(std::move(path)) {}
  template <class T>
  void operator()(const char* key, T& value) {
    const json* v = find(key);
    if (v == nullptr) throw FieldError("no " + path_ + key);
    decode(*v, value, path_ + key);
  }
  template <class T>
  void optional(const char* key, std::optional<T>& value) {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) {
      value.reset();
      return;
    }
    T decoded{};
    decode(*v, decoded, path_ + key);
    value = std::move(decoded);
  }
  template <class T>
  void optional(const char* key, T& value) {  // absent: the default it holds
    if (const json* v = find(key); v != nullptr) decode(*v, value, path_ + key);
  }
  template <class T>
  void nullable(const char* key, std::optional<T>& value) {
    optional(key, value);
  }

  template <class T>
  static void decode(const json& v, T& value, const std::string& path) {
    if constexpr (std::is_same_v<T, json>) {
      value = v;
    } else if constexpr (detail::has_fields<T>::value) {
      expect(v.is_object(), v, path, "an object");
      Reader reader(v, path + "/");
      value.fields(reader);
    } else if constexpr (detail::is_vector<T>::value) {
      expect(v.is_array(), v, path, "an array");
      value.clear();
      for (std::size_t i = 0; i < v.size(); ++i) {
        typename T::value_type item{};
        decode(v[i], item, path + "/" + std::to_string(i));
        value.push_back(std::move(item));
      }
    } else if constexpr (detail::is_string_map<T>::value) {
      expect(v.is_object(), v, path, "an object");
      value.clear();
      for (const auto& [k, item] : v.items()) decode(item, value[k], path + "/" + k);
    } else if constexpr (std::is_same_v<T, std::string>) {
      expect(v.is_string(), v, path, "a string");
      value = v.get<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      expect(v.is_boolean(), v, path, "true or false");
      value = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      expect(v.is_number_integer(), v, path, "an integer");
      const auto i = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(detail::kMaxInteger)
                         ? detail::kMaxInteger + 1
                         : v.get<std::int64_t>();
      expect(i >= -detail::kMaxInteger && i <= detail::kMaxInteger &&
                 i >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                 static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max()),
             v, path, "an integer in range");
      value = static_cast<T>(i);
    } else if constexpr (std::is_floating_point_v<T>) {
      expect(v.is_number(), v, path, "a number");
      value = v.get<T>();
    } else {
      static_assert(sizeof(T) == 0, "a ledger field of a type Reader does not know");
    }
  }

 private:
  const json* find(const char* key) const {
    if (!in_.is_object()) return nullptr;
    const auto it = in_.find(key);
    return it == in_.end() ? nullptr : &*it;
  }
  static void expect(bool ok, const json& v, const std::string& path, const char* what) {
    if (!ok) throw FieldError(path + " is " + detail::preview(v) + ", not " + what);
  }
  const json& in_;
  std::string path_;
};

template <class Row>
json to_json(const Row& row) {
  return Writer::encode(row);
}

template <class Row>
Row from_json(const json& j) {
  Row row{};
  if (!j.is_object()) throw FieldError("not a JSON object");
  Reader reader(j, "");
  row.fields(reader);
  return row;
}

}  // namespace trainlab::fields

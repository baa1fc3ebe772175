#pragma once
// A decision record's NDJSON line, as the log file, the control API's ring and
// `vibepit logs` carry it. Written by hand: the writer thread formats every record, and
// this is several times cheaper than building a JSON object first
// (bench/micro/log_bench.cpp). Every line is valid JSON whatever the record holds: text
// from the wire is escaped, and bytes that are not UTF-8 become U+FFFD.
#include <string>

#include "vibepit/decision_log/record.hpp"

namespace vibepit::decision_log {

std::string to_json_line(const DecisionRecord& r);                 // one NDJSON line, with '\n'
void append_json_line(std::string& out, const DecisionRecord& r);  // the same, appended to out

}  // namespace vibepit::decision_log

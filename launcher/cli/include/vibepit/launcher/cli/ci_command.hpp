#pragma once
// `vibepit ci`: run one command in a fresh session, non-interactively, and report every
// destination it reached for (docs/ci.md).
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "vibepit/launcher/ci/ci_report.hpp"
#include "vibepit/launcher/session/session_start.hpp"

namespace vibepit::launcher {

enum class ReportFormat { json, markdown, junit };

struct CiOptions {
  std::filesystem::path path;  // the project (default: the current directory's git root)
  CiMode mode = CiMode::enforce;
  std::vector<std::filesystem::path> policies;  // further network.yaml files
  std::vector<std::string> allow_http, allow_dns, presets;
  SandboxSettings sandbox;
  std::filesystem::path report;  // empty: only the session directory's report.json
  ReportFormat format = ReportFormat::json;
  std::filesystem::path learn_file;  // empty: <project>/.vibepit/network.learned.yaml
  bool fail_on_deny = false;
  std::string cache_home;  // empty: a fresh home for this job, removed at its end
  std::vector<std::string> command;
  bool quiet = false;
};

// The exit status is the command's. Others: kCiDenied when --fail-on-deny sees a denial
// after the command exited 0; kCiIncomplete, in every mode and whatever the command's
// status, when the report may lack records (lost, dropped, or a proxy that did not stop
// cleanly); kRunFailed (125) when the session or the command could not run; 128+N when
// vibepit ci was stopped by signal N. The report is written in every case.
int cmd_ci(const CiOptions& o, std::ostream& out, std::ostream& err);

inline constexpr int kCiDenied = 3;
inline constexpr int kCiIncomplete = 4;

}  // namespace vibepit::launcher

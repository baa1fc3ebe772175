// vibepit: the command-line front end. Parses flags and calls the commands.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include <CLI/CLI.hpp>

#include "vibepit/launcher/cli/ci_command.hpp"
#include "vibepit/launcher/cli/commands.hpp"
#include "vibepit/launcher/cli/image_commands.hpp"
#include "vibepit/launcher/cli/monitor_command.hpp"
#include "vibepit/launcher/cli/run_command.hpp"
#include "vibepit/launcher/cli/secret_command.hpp"
#include "vibepit/launcher/cli/session_commands.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"

namespace {

// The options `run` and `ci` share: the rules and the sandbox's settings. One value per
// flag (-p a -p b), so a PATH after them stays the PATH.
void add_session_options(CLI::App* cmd, std::vector<std::string>& allow_http,
                         std::vector<std::string>& allow_dns, std::vector<std::string>& presets,
                         vibepit::launcher::SandboxSettings& s) {
  cmd->add_option("-a,--allow-http", allow_http, "allow HTTP/CONNECT to DOMAIN:PORT")
      ->allow_extra_args(false);
  cmd->add_option("--allow-dns", allow_dns, "answer DNS for NAME")->allow_extra_args(false);
  cmd->add_option("-p,--preset", presets, "add a built-in preset's rules")->allow_extra_args(false);
  cmd->add_option("--image", s.image, "run this image instead of the default sandbox");
  cmd->add_option("--memory", s.memory, "the sandbox's memory limit (default 4g)");
  cmd->add_option("--cpus", s.cpus,
                  "the sandbox's CPU limit (default: the host's CPUs but one, at least 1; "
                  "0: no limit)")
      ->check(CLI::Range(0.0, 1024.0));
  cmd->add_option("--upstream-dns", s.upstream_dns,
                  "resolvers the proxy asks (default: the host's)")
      ->allow_extra_args(false);
  cmd->add_option("--upstream-ca", s.upstream_ca,
                  "also trust this PEM bundle for the upstreams of inspected hosts (a "
                  "corporate CA); the host's system CAs are always trusted")
      ->check(CLI::ExistingFile);
  cmd->add_option("--secret", s.secrets,
                  "NAME=HOST:PORT[,header=H][,format=F][,file=PATH|,stdin]: the proxy adds this "
                  "credential to requests for HOST:PORT; the sandbox gets only a placeholder in "
                  "NAME. The value: the environment variable NAME, the file, or stdin "
                  "(docs/credentials.md)")
      ->allow_extra_args(false);
  cmd->add_option("--sessions-dir", s.sessions_root,
                  "where sessions live (default: $XDG_STATE_HOME/vibepit/sessions)");
  cmd->add_option_function<std::string>(
         "--user", [&s](const std::string& v) { s.user = vibepit::launcher::parse_user_option(v); },
         "run the agent as UID[:GID] (default: vibepit's own user; as root, the project's "
         "owner)")
      ->check([](const std::string& v) {
        try {
          vibepit::launcher::parse_user_option(v);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
}

int run(int argc, char** argv) {
  using namespace vibepit::launcher;
  CLI::App app{"vibepit: run AI coding agents without giving them the internet"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "vibepit 0.1.0");
  app.footer(
      "Exit codes: 0 ok, 1 the proxy refused, 2 usage or invalid entries, "
      "3 no session or the proxy did not answer, 4 a local file problem. "
      "See docs/cli.md.\n");

  Common common;
  std::string sessions_root;
  bool no_color = false;
  auto add_common = [&](CLI::App* sub, bool json_output) {
    sub->add_option("--session", common.session,
                    "session id (under the sessions directory) or session directory; "
                    "default: $VIBEPIT_SESSION, else the only running session");
    sub->add_option("--sessions-dir", sessions_root,
                    "where sessions live (default: $XDG_STATE_HOME/vibepit/sessions)");
    if (json_output) sub->add_flag("--json", common.json, "machine-readable output");
    sub->add_flag("--no-color", no_color, "no colours, even on a terminal");
  };

  AllowOptions allow;
  std::string network_file;
  bool no_save = false;
  auto add_allow = [&](const char* name, const char* what, const char* example) {
    auto* sub = app.add_subcommand(name, what);
    add_common(sub, true);
    sub->add_option("entries", allow.entries, example)->required();
    sub->add_flag("--no-save", no_save,
                  "apply to the session only; do not record the entries "
                  "in .vibepit/network.yaml");
    sub->add_option("--file", network_file,
                    "the project's network file (default: .vibepit/network.yaml)");
    return sub;
  };
  auto* allow_http = add_allow("allow-http", "allow HTTP/CONNECT to DOMAIN:PORT for this session",
                               "DOMAIN:PORT entries: api.github.com:443, *.pypi.org:443, "
                               "example.com:8*, [2001:db8::1]:443");
  auto* allow_dns = add_allow("allow-dns", "allow DNS answers for names in this session",
                              "names: example.com (that name), *.example.com (subdomains)");

  auto* secret_cmd = app.add_subcommand(
      "secret", "the session's credentials, which the proxy adds to requests for their host");
  secret_cmd->require_subcommand(1);
  std::string secret_arg;
  auto* secret_add = secret_cmd->add_subcommand(
      "add", "set a credential (its value from the environment variable NAME, file=PATH or stdin)");
  add_common(secret_add, true);
  secret_add
      ->add_option("spec", secret_arg, "NAME=HOST:PORT[,header=H][,format=F][,file=PATH|,stdin]")
      ->required();
  auto* secret_rm = secret_cmd->add_subcommand("rm", "remove a credential");
  add_common(secret_rm, true);
  secret_rm->add_option("name", secret_arg, "the credential's NAME")->required();
  auto* secret_ls = secret_cmd->add_subcommand("ls", "list the credentials (never a value)");
  add_common(secret_ls, true);

  auto* rules = app.add_subcommand("rules", "show the session's live rules and generation");
  add_common(rules, true);

  LogsOptions logs;
  auto* logs_cmd = app.add_subcommand("logs", "show the session's decisions");
  add_common(logs_cmd, true);
  logs_cmd->add_flag("-f,--follow", logs.follow, "keep printing decisions as they happen");
  logs_cmd->add_flag("--denied", logs.denied, "only denials");
  logs_cmd->add_option("-n,--lines", logs.limit, "how many recent decisions to show first")
      ->check(CLI::Range(1, 1'000'000));

  auto* status = app.add_subcommand("status", "list running sessions with their counters");
  add_common(status, true);

  MonitorOptions monitor;
  std::string monitor_path;
  auto* monitor_cmd = app.add_subcommand(
      "monitor", "watch a session's denials and held requests, and allow them with one key");
  add_common(monitor_cmd, false);
  monitor_cmd->add_option("path", monitor_path,
                          "the project whose session to watch (default: as --session)");

  RunOptions run;
  std::string run_path;
  auto* run_cmd = app.add_subcommand(
      "run", "start a sandbox for the project (or join its running one) and attach to it");
  run_cmd->add_option("path", run_path, "the project (default: the current directory's git root)");
  add_session_options(run_cmd, run.allow_http, run.allow_dns, run.presets, run.sandbox);
  run_cmd->add_flag("-q,--quiet", run.quiet, "no progress lines");
  run_cmd->add_flag("-T,--no-tty", run.no_tty, "no terminal, even when stdin is one");
  run_cmd->add_flag("-y,--yes", run.yes, "approve new .vibepit/network.yaml entries");
  run_cmd->add_flag("--ask", run.ask,
                    "hold a request that no rule allows until you allow or refuse it in "
                    "vibepit monitor (or --ask-timeout passes)");
  run_cmd
      ->add_option("--ask-timeout", run.ask_timeout,
                   "with --ask: how long a request is held, in seconds (default 60)")
      ->check(CLI::Range(0.001, 86400.0));
  run_cmd->footer(
      "Everything after -- is the command to run in the sandbox: vibepit run -- make test");

  CiOptions ci;
  std::string ci_path, ci_mode = "enforce", ci_format = "json";
  std::vector<std::string> ci_policies;
  auto* ci_cmd = app.add_subcommand(
      "ci", "run a command in a fresh sandbox, non-interactively, and report every destination");
  ci_cmd->add_option("path", ci_path, "the project (default: the current directory's git root)");
  ci_cmd
      ->add_option("--mode", ci_mode,
                   "enforce (the rules apply), audit (allow and record what they would "
                   "deny), learn (audit, then propose a network.yaml)")
      ->check(CLI::IsMember({"enforce", "audit", "learn"}));
  ci_cmd->add_option("--policy", ci_policies, "a further network.yaml file to apply")
      ->allow_extra_args(false);
  add_session_options(ci_cmd, ci.allow_http, ci.allow_dns, ci.presets, ci.sandbox);
  // A file's name, not a directory's: the report and the learned rules are written by name.
  const auto names_a_file = [](const std::string& s) {
    const auto f = std::filesystem::path(s).filename();
    return f.empty() || f == "." || f == ".." ? std::string("names a directory, not a file")
                                              : std::string();
  };
  ci_cmd->add_option("--report", ci.report, "write the report to FILE")->check(names_a_file);
  ci_cmd->add_option("--format", ci_format, "the report's format: json, markdown, junit")
      ->check(CLI::IsMember({"json", "markdown", "junit"}));
  ci_cmd
      ->add_option("--learn-file", ci.learn_file,
                   "learn mode: where the proposed rules go "
                   "(default: .vibepit/network.learned.yaml in the project)")
      ->check(names_a_file);
  ci_cmd->add_flag("--fail-on-deny", ci.fail_on_deny,
                   "exit 3 when the command exits 0 but something was denied");
  ci_cmd
      ->add_option("--cache-home", ci.cache_home,
                   "keep the sandbox's home in a cache named KEY for the next job that names "
                   "it (default: a fresh home, removed at the end)")
      ->check([](const std::string& key) {
        try {
          check_cache_key(key);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  ci_cmd->add_flag("-q,--quiet", ci.quiet, "no progress lines");
  ci_cmd->footer("Everything after -- is the command: vibepit ci --fail-on-deny -- make test");

  std::string down_path, down_session;
  auto* down =
      app.add_subcommand("down", "remove the project's session (its containers and networks)");
  down->add_option("path", down_path, "the project (default: the current directory's git root)");
  down->add_option("--session", down_session, "remove this session id instead");
  bool sessions_json = false;
  std::string sessions_dir;
  auto* sessions = app.add_subcommand("sessions", "list sessions on the Docker engine");
  sessions->add_flag("--json", sessions_json, "machine-readable output");
  sessions->add_option("--sessions-dir", sessions_dir,
                       "where sessions live (default: $XDG_STATE_HOME/vibepit/sessions)");
  // Internal: the project's filter process (project_guard.hpp), started by run and ci.
  GuardOptions guard;
  std::string guard_project, guard_mountpoint, guard_log;
  auto* guard_cmd = app.add_subcommand("__project-guard", "")->group("");
  guard_cmd->add_option("project", guard_project)->required();
  guard_cmd->add_option("mountpoint", guard_mountpoint)->required();
  guard_cmd->add_option("session", guard.session_id)->required();
  guard_cmd->add_option("uid", guard.uid)->required();
  guard_cmd->add_option("gid", guard.gid)->required();
  guard_cmd->add_option("log", guard_log)->required();

  bool prune_all = false;
  auto* prune = app.add_subcommand(
      "prune", "remove what sessions whose vibepit run is gone left behind (by label)");
  prune->add_flag("--all", prune_all, "remove every session, attached or not");
  prune->add_option("--sessions-dir", sessions_dir,
                    "where sessions live (default: $XDG_STATE_HOME/vibepit/sessions)");

  auto* image = app.add_subcommand("image", "build, list and remove vibepit's images");
  image->require_subcommand(1);
  ImageBuildOptions image_build;
  std::string base = "auto";
  auto* image_build_cmd =
      image->add_subcommand("build", "build the proxy image and the default sandbox image");
  image_build_cmd
      ->add_option("--base", base,
                   "where Debian comes from: auto (debian:bookworm-slim when present or "
                   "pullable, else debootstrap), slim, debootstrap")
      ->check(CLI::IsMember({"auto", "slim", "debootstrap"}));
  image_build_cmd->add_flag("--no-pull", image_build.sandbox.no_pull,
                            "never ask a registry for debian:bookworm-slim");
  image_build_cmd->add_option("--mirror", image_build.sandbox.mirror,
                              "Debian mirror for debootstrap");
  image_build_cmd->add_flag("-q,--quiet", image_build.quiet, "no progress lines");
  bool image_json = false;
  auto* image_ls = image->add_subcommand("ls", "list vibepit's images");
  image_ls->add_flag("--json", image_json, "machine-readable output");
  bool image_rm_all = false;
  auto* image_rm = image->add_subcommand("rm", "remove vibepit's sandbox and proxy images");
  image_rm->add_flag("--all", image_rm_all, "also the debootstrap base image");

  // `vibepit run [OPTIONS] [PATH] -- CMD...`: the command is everything after "--", taken
  // here so that CLI11 never reads the command's own options as ours.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    std::vector<std::string>* command = nullptr;
    for (int j = 1; j < i && !command; ++j) {
      if (std::string_view(argv[j]) == "run") command = &run.command;
      if (std::string_view(argv[j]) == "ci") command = &ci.command;
    }
    if (!command) break;
    command->assign(argv + i + 1, argv + argc);
    if (command->empty()) {
      std::cerr << "vibepit: nothing after --\n";
      return kUsage;
    }
    argc = i;
    break;
  }
  CLI11_PARSE(app, argc, argv);
  if (!sessions_root.empty()) common.sessions_root = sessions_root;
  common.color =
      !no_color && !common.json && ::isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;

  if (allow_http->parsed() || allow_dns->parsed()) {
    allow.list = allow_http->parsed() ? "allow-http" : "allow-dns";
    allow.save = !no_save;
    allow.network_file = network_file.empty() ? ".vibepit/network.yaml" : network_file;
    return cmd_allow(common, allow, std::cout, std::cerr);
  }
  if (secret_add->parsed()) return cmd_secret_add(common, secret_arg, std::cout, std::cerr);
  if (secret_rm->parsed()) return cmd_secret_rm(common, secret_arg, std::cout, std::cerr);
  if (secret_ls->parsed()) return cmd_secret_ls(common, std::cout, std::cerr);
  if (rules->parsed()) return cmd_rules(common, std::cout, std::cerr);
  if (logs_cmd->parsed()) return cmd_logs(common, logs, std::cout, std::cerr);
  if (status->parsed()) return cmd_status(common, std::cout, std::cerr);
  if (monitor_cmd->parsed()) {
    monitor.path = monitor_path;
    return cmd_monitor(common, monitor, std::cout, std::cerr);
  }
  if (run_cmd->parsed()) {
    run.path = run_path;
    apply_test_settings(run.sandbox);
    return cmd_run(run, std::cout, std::cerr);
  }
  if (ci_cmd->parsed()) {
    if (ci.command.empty()) {
      std::cerr << "vibepit ci: the command to run goes after --: vibepit ci -- make test\n";
      return kUsage;
    }
    ci.path = ci_path;
    ci.mode = *parse_ci_mode(ci_mode);
    ci.format = ci_format == "markdown" ? ReportFormat::markdown
                : ci_format == "junit"  ? ReportFormat::junit
                                        : ReportFormat::json;
    ci.policies.assign(ci_policies.begin(), ci_policies.end());
    apply_test_settings(ci.sandbox);
    return cmd_ci(ci, std::cout, std::cerr);
  }
  if (down->parsed()) return cmd_down(down_path, down_session, std::cout, std::cerr);
  if (sessions->parsed()) return cmd_sessions(sessions_dir, sessions_json, std::cout, std::cerr);
  if (guard_cmd->parsed()) {
    guard.project = guard_project;
    guard.mountpoint = guard_mountpoint;
    guard.log = guard_log;
    return project_guard_main(guard);
  }
  if (prune->parsed()) return cmd_prune(sessions_dir, prune_all, std::cout, std::cerr);
  if (image_build_cmd->parsed()) {
    using Base = SandboxImageOptions::Base;
    image_build.sandbox.base = base == "slim"          ? Base::slim
                               : base == "debootstrap" ? Base::debootstrap
                                                       : Base::automatic;
    return cmd_image_build(image_build, std::cout, std::cerr);
  }
  if (image_ls->parsed()) return cmd_image_ls(image_json, std::cout, std::cerr);
  if (image_rm->parsed()) return cmd_image_rm(image_rm_all, std::cout, std::cerr);
  return kUsage;
}

}  // namespace

// What no command expected (memory, a logger): said, and exit 125, never an abort.
int main(int argc, char** argv) {
  // A closed pipe on stdout or stderr (vibepit run | tee, a test harness that went away)
  // is a failed write, not the end of the process: it would otherwise die at its next
  // message, before removing the session it made. Children start with it at its default.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vibepit: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "vibepit: an unknown error\n";
  }
  return vibepit::launcher::kRunFailed;
}

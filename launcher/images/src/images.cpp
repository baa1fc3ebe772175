#include "vibepit/launcher/images/images.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "vibepit/docker/tar.hpp"
#include "vibepit/launcher/host/embedded_files.hpp"
#include "vibepit/launcher/host/process.hpp"
#include "vibepit/launcher/host/sha256.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
namespace {

constexpr const char* kProxyInImage = "usr/local/bin/vibepit-proxy";
constexpr const char* kSlimBase = "debian:bookworm-slim";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A build's own lines, less the classic builder's bookkeeping (" ---> 1a2b", "Running in",
// "Removing intermediate container"), which says nothing to a user.
void forward_progress(const Report& report, const docker::Progress& p) {
  if (!report || p.text.empty()) return;
  const std::string_view t = p.text;
  if (t.rfind(" ---> ", 0) == 0 || t.rfind("Removing intermediate container", 0) == 0) return;
  report(p.text);
}

const std::string& embedded(const std::string& name) {
  const auto& files = embedded_files();
  auto it = files.find(name);
  if (it == files.end()) throw std::logic_error("not embedded: container/" + name);
  return it->second;
}

std::vector<std::string> sandbox_packages() {
  std::vector<std::string> out;
  std::istringstream in(embedded("sandbox/packages"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  return out;
}

// Mount points at or below `dir`: debootstrap mounts /proc and /sys in its target, and
// removing a tree with those still mounted would reach into the host's.
bool has_mounts_under(const fs::path& dir) {
  std::ifstream in("/proc/self/mounts");
  const std::string prefix = dir.string();
  for (std::string dev, at, rest; in >> dev >> at && std::getline(in, rest);)
    if (at == prefix || at.rfind(prefix + "/", 0) == 0) return true;
  return false;
}

// Run `argv`, each line of its output to `report`; throws naming `what`, its exit status and
// last line (and `more`) when it fails.
void run_reporting(const std::vector<std::string>& argv, const std::string& what,
                   const std::string& more, const Report& report) {
  Child child(argv, Child::Output::pipe_with_stderr);
  std::string pending, tail;
  char buf[4096];
  while (std::size_t n = child.read(buf, sizeof buf)) {
    pending.append(buf, n);
    for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (report) report(line);
      tail = line;
    }
  }
  if (int rc = child.wait(); rc != 0)
    throw std::runtime_error(what + " failed (exit " + std::to_string(rc) + "): " + tail + more);
}

// The debootstrap base image: Debian 12 minbase with the sandbox's packages, imported.
std::string debootstrap_base(docker::Client& docker, const SandboxImageOptions& opts,
                             const Report& report) {
  const auto packages = sandbox_packages();
  std::string joined;
  for (const auto& p : packages) joined += (joined.empty() ? "" : ",") + p;
  const std::string tag = "bookworm-" + sha256_hex(joined).substr(0, 12);
  std::string ref = docker.local_image("vibepit-base:" + tag);
  if (docker.image_inspect(ref)) return ref;
  if (::geteuid() != 0)
    throw std::runtime_error(
        "no debian:bookworm-slim image, and building one with debootstrap needs root: run "
        "`sudo vibepit image build`, or load debian:bookworm-slim into Docker");
  const fs::path target = (opts.work_dir.empty() ? fs::temp_directory_path() : opts.work_dir) /
                          ("vibepit-rootfs-" + std::to_string(::getpid()));
  fs::remove_all(target);
  fs::create_directories(target);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      if (!has_mounts_under(dir)) fs::remove_all(dir, ec);
    }
  } cleanup{target};
  if (report) report("debootstrap bookworm (" + joined + ") from " + opts.mirror);
  const std::string log = " (its log: " + (target / "debootstrap/debootstrap.log").string() + ")";
  run_reporting({"debootstrap", "--variant=minbase", "bookworm", target.string(), opts.mirror},
                "debootstrap", log, report);
  // The packages with apt in the new root: debootstrap's --include resolves dependencies too
  // simply for nodejs and npm.
  std::vector<std::string> install = {
      "chroot",  target.string(), "env", "DEBIAN_FRONTEND=noninteractive",
      "apt-get", "install",       "-y",  "--no-install-recommends"};
  install.insert(install.end(), packages.begin(), packages.end());
  run_reporting(install, "apt-get install in the new root", "", report);
  run_reporting({"chroot", target.string(), "apt-get", "clean"}, "apt-get clean", "", report);
  if (report) report("importing the root filesystem as " + ref);
  // One label per LABEL: Podman reads "LABEL a=1 b=2" as a single label a="1 b=2".
  std::vector<std::string> changes = {
      "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "CMD [\"/bin/bash\"]"};
  for (const auto& [k, v] : with_test_label({{kImageLabel, "base"}}))
    changes.push_back("LABEL " + k + "=" + v);
  // Package caches and index files are left out: apt in the sandbox has no network anyway.
  Child tar({"tar", "--numeric-owner", "--exclude=./var/cache/apt/archives/*.deb",
             "--exclude=./var/cache/apt/*.bin", "--exclude=./var/lib/apt/lists/*_*", "-C",
             target.string(), "-cf", "-", "."},
            Child::Output::pipe);
  auto id = docker.image_import(
      [&](std::string& out) {
        out.resize(256 * 1024);
        const std::size_t n = tar.read(out.data(), out.size());
        out.resize(n);
        return n > 0;
      },
      docker.local_image("vibepit-base"), tag, changes,
      [&](const docker::Progress& p) { forward_progress(report, p); });
  if (int rc = tar.wait(); rc != 0)
    throw std::runtime_error("tar of the root filesystem failed (exit " + std::to_string(rc) + ")");
  (void)id;
  return ref;
}

}  // namespace

docker::Labels with_test_label(docker::Labels labels) {
  if (const char* v = std::getenv("VIBEPIT_TEST_LABEL"); v && *v) labels["dev.vibepit.test"] = v;
  return labels;
}

fs::path find_proxy_binary() {
  if (const char* env = std::getenv("VIBEPIT_PROXY_BINARY"); env && *env) {
    fs::path p(env);
    if (!fs::is_regular_file(p))
      throw std::runtime_error("VIBEPIT_PROXY_BINARY=" + p.string() + ": no such file");
    return p;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  fs::path next = self.parent_path() / "vibepit-proxy";
  if (!ec && fs::is_regular_file(next)) return next;
  throw std::runtime_error("cannot find vibepit-proxy next to " + self.string() +
                           "; set VIBEPIT_PROXY_BINARY to its path");
}

std::vector<fs::path> shared_objects(const fs::path& binary) {
  int status = 0;
  const std::string out = run_capture({"ldd", binary.string()}, status);
  if (status != 0)
    throw std::runtime_error("ldd " + binary.string() + " failed (exit " + std::to_string(status) +
                             ")");
  std::vector<fs::path> libs;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    // "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "\t/lib64/ld-linux... (0x...)"
    if (line.find("not found") != std::string::npos)
      throw std::runtime_error("ldd " + binary.string() + ": " + line);
    std::string path;
    if (auto arrow = line.find("=> "); arrow != std::string::npos) {
      path = line.substr(arrow + 3);
    } else {
      path = line.substr(line.find_first_not_of(" \t"));
    }
    path = path.substr(0, path.find(" ("));
    if (path.empty() || path.front() != '/') continue;  // linux-vdso.so.1: no file
    libs.emplace_back(path);
  }
  if (libs.empty()) throw std::runtime_error("ldd " + binary.string() + " listed nothing");
  return libs;
}

ProxyImage ensure_proxy_image(docker::Client& docker, const fs::path& binary,
                              const Report& report) {
  const auto libs = shared_objects(binary);
  // One hash over every file's place and content: a new binary or an upgraded library is a
  // new image.
  Sha256 h;
  std::vector<std::pair<std::string, std::string>> files;
  files.emplace_back(kProxyInImage, read_file(binary));
  for (const auto& lib : libs) files.emplace_back(lib.relative_path().string(), read_file(lib));
  for (const auto& [path, content] : files) {
    h.update(path);
    h.update(std::string_view("\0", 1));
    h.update(std::to_string(content.size()));
    h.update(content);
  }
  const std::string digest = h.hex();
  ProxyImage img;
  img.tag = docker.local_image("vibepit-proxy:" + digest.substr(0, 16));
  if (auto j = docker.image_inspect(img.tag)) {
    img.size = j->value("Size", std::int64_t{0});
    return img;
  }
  if (report)
    report("building proxy image " + img.tag + " (FROM scratch, " + std::to_string(libs.size()) +
           " shared objects)");
  docker::TarWriter ctx;
  const std::string user = std::to_string(kProxyUid);
  ctx.add_file("Dockerfile", "FROM scratch\nCOPY rootfs/ /\nUSER " + user + ":" + user +
                                 "\nENTRYPOINT [\"/" + kProxyInImage + "\"]\n");
  for (const auto& [path, content] : files) ctx.add_file("rootfs/" + path, content, 0755);
  docker.image_build(
      ctx.finish(), img.tag,
      with_test_label({{kImageLabel, "proxy"}, {"dev.vibepit.proxy-sha256", digest}}),
      [&](const docker::Progress& p) { forward_progress(report, p); });
  img.built = true;
  if (auto j = docker.image_inspect(img.tag)) img.size = j->value("Size", std::int64_t{0});
  return img;
}

SandboxImageOptions sandbox_options_for_invoker() {
  SandboxImageOptions o;
  if (::getuid() != 0) {
    o.uid = ::getuid();
    o.gid = ::getgid();
  }
  return o;
}

std::string sandbox_image_tag(uid_t uid, gid_t gid) {
  const std::string def = embedded("sandbox/Dockerfile") + embedded("sandbox/packages");
  return "vibepit-sandbox:" + sha256_hex(def).substr(0, 12) + "-" + std::to_string(uid) + "-" +
         std::to_string(gid);
}

std::string build_sandbox_image(docker::Client& docker, const SandboxImageOptions& opts,
                                const Report& report) {
  using Base = SandboxImageOptions::Base;
  std::string base;
  if (opts.base != Base::debootstrap) {
    if (docker.image_inspect(kSlimBase)) {
      base = kSlimBase;
    } else if (!opts.no_pull) {
      if (report) report(std::string("pulling ") + kSlimBase);
      try {
        docker.image_pull(kSlimBase,
                          [&](const docker::Progress& p) { forward_progress(report, p); });
        base = kSlimBase;
      } catch (const docker::DockerError& e) {
        if (opts.base == Base::slim) throw;
        if (report) report(std::string("cannot pull ") + kSlimBase + ": " + e.what());
      }
    } else if (opts.base == Base::slim) {
      throw std::runtime_error(std::string("no ") + kSlimBase + " image and --no-pull given");
    }
  }
  const bool from_slim = !base.empty();
  if (!from_slim) base = debootstrap_base(docker, opts, report);
  std::string tag = docker.local_image(sandbox_image_tag(opts.uid, opts.gid));
  if (report) report("building " + tag + " FROM " + base);
  docker::TarWriter ctx;
  ctx.add_file("Dockerfile", embedded("sandbox/Dockerfile"));
  ctx.add_file("packages", embedded("sandbox/packages"));
  docker.image_build(
      ctx.finish(), tag,
      with_test_label({{kImageLabel, "sandbox"},
                       {"dev.vibepit.uid", std::to_string(opts.uid)},
                       {"dev.vibepit.gid", std::to_string(opts.gid)}}),
      [&](const docker::Progress& p) { forward_progress(report, p); },
      {{"BASE", base},
       {"INSTALL", from_slim ? "1" : "0"},
       {"CODE_UID", std::to_string(opts.uid)},
       {"CODE_GID", std::to_string(opts.gid)}},
      from_slim ? "" : "none");
  return tag;
}

}  // namespace vibepit::launcher

// The sandbox's home: the project's volume, kept from session to session; a CI job's own,
// removed with its session; or a named cache. One per agent user.
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "session_roles.hpp"
#include "vibepit/launcher/host/sha256.hpp"
#include "vibepit/launcher/session/session.hpp"

namespace vibepit::launcher {
namespace {

// Volume roles besides "home" (the project's) and kRoleSessionHome: a named cache home
// (vibepit ci --cache-home KEY) with its key as a label.
constexpr const char* kRoleCacheHome = "cache-home";
constexpr const char* kCacheKeyLabel = "dev.vibepit.cache-key";
// The agent user a kept home was made for (its files are that uid's).
constexpr const char* kHomeUidLabel = "dev.vibepit.uid";

}  // namespace

void check_cache_key(const std::string& key) {
  const bool ok =
      !key.empty() && key.size() <= 64 && std::all_of(key.begin(), key.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
      });
  if (!ok)
    throw std::invalid_argument("--cache-home \"" + key.substr(0, 64) +
                                "\": a key is 1 to 64 of the characters A-Z a-z 0-9 . _ -");
}

std::string Session::home_volume(docker::Client& engine) {
  // A job's own home: made empty (Docker fills it from the image), removed with the session.
  if (spec_.home == SessionSpec::Home::session) {
    auto v = engine.volume_create(
        {{"Name", "vibepit-home-" + spec_.id}, {"Labels", labels(kRoleSessionHome)}});
    return v.value("Name", "");
  }
  // The project's home, or one of its named caches: kept, found by label, one per agent
  // user. Docker fills a new volume from the image, so a home belongs to the user the
  // image was built for; an agent user of its own gets a home of its own (else HOME would
  // be someone else's and closed to it). Homes made before they carried the user's id
  // belong to the user that vibepit chose then: its own, or 1000 under root.
  const bool cache = spec_.home == SessionSpec::Home::cache;
  const std::string role = cache ? kRoleCacheHome : "home";
  const std::string uid = std::to_string(spec_.uid);
  const std::string unlabelled_uid =
      std::to_string(::getuid() != 0 ? ::getuid() : SandboxImageOptions{}.uid);
  for (const auto& v :
       engine.volumes_by_label(std::string(docker::label::kProject) + "=" + spec_.project.hash)) {
    if (!v.contains("Labels") || !v["Labels"].is_object()) continue;
    const auto& l = v["Labels"];
    if (l.value(docker::label::kRole, "") == role &&
        (!cache || l.value(kCacheKeyLabel, "") == spec_.home_cache_key) &&
        l.value(kHomeUidLabel, unlabelled_uid) == uid)
      return v.value("Name", "");
  }
  auto l = labels(role);
  l[kHomeUidLabel] = uid;
  std::string name = "vibepit-home-" + spec_.project.hash + "-u" + uid;
  if (cache) {
    l[kCacheKeyLabel] = spec_.home_cache_key;
    name += "-cache-" + sha256_hex(spec_.home_cache_key).substr(0, 16);
  }
  return engine.volume_create({{"Name", name}, {"Labels", l}}).value("Name", "");
}

}  // namespace vibepit::launcher

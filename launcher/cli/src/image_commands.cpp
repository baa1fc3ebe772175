#include "vibepit/launcher/cli/image_commands.hpp"

#include <unistd.h>

#include <iomanip>
#include <ostream>

#include "vibepit/launcher/cli/engine.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"

namespace vibepit::launcher {

int cmd_image_build(const ImageBuildOptions& o, std::ostream& out, std::ostream& err) {
  return with_docker("image build", err, [&](docker::Client& docker) {
    const bool color = ::isatty(STDERR_FILENO) && std::getenv("NO_COLOR") == nullptr;
    auto report = status_reporter(err, o.quiet, color);
    auto proxy = ensure_proxy_image(docker, find_proxy_binary(), report);
    if (!proxy.built && report) report("using " + proxy.tag + " (already built)");
    auto tag = build_sandbox_image(docker, o.sandbox, report);
    out << proxy.tag << "\n" << tag << "\n";
    return kOk;
  });
}

int cmd_image_ls(bool json, std::ostream& out, std::ostream& err) {
  return with_docker("image ls", err, [&](docker::Client& docker) {
    auto images = docker.images_by_label(kImageLabel);
    if (json) {
      docker::Json list = docker::Json::array();
      for (const auto& i : images)
        list.push_back({{"id", i.value("Id", "")},
                        {"tags", i.value("RepoTags", docker::Json::array())},
                        {"kind", i["Labels"].value(kImageLabel, "")},
                        {"size", i.value("Size", std::int64_t{0})},
                        {"created", i.value("Created", std::int64_t{0})}});
      out << list.dump(2) << "\n";
      return kOk;
    }
    out << std::left << std::setw(10) << "KIND" << std::setw(52) << "IMAGE"
        << "SIZE\n";
    for (const auto& i : images) {
      std::string tag = "<none>";
      if (i.contains("RepoTags") && i["RepoTags"].is_array() && !i["RepoTags"].empty())
        tag = i["RepoTags"][0].get<std::string>();
      const double mb = static_cast<double>(i.value("Size", std::int64_t{0})) / 1e6;
      out << std::left << std::setw(10) << i["Labels"].value(kImageLabel, "") << std::setw(52)
          << tag << std::fixed << std::setprecision(1) << mb << " MB\n";
    }
    return kOk;
  });
}

int cmd_image_rm(bool all, std::ostream& out, std::ostream& err) {
  return with_docker("image rm", err, [&](docker::Client& docker) {
    int failed = 0;
    for (const auto& i : docker.images_by_label(kImageLabel)) {
      const std::string kind = i["Labels"].value(kImageLabel, "");
      if (kind == "base" && !all) continue;
      const std::string id = i.value("Id", "");
      try {
        docker.image_remove(id, true);
        out << "removed " << kind << " image " << id.substr(0, 19) << "\n";
      } catch (const docker::DockerError& e) {
        err << "vibepit: image rm: " << id.substr(0, 19) << ": " << e.what() << "\n";
        ++failed;
      }
    }
    return failed ? kRefused : kOk;
  });
}

}  // namespace vibepit::launcher

#pragma once
// `vibepit image build|ls|rm`: the images vibepit builds, found by their label.
#include <ostream>
#include <string>

#include "vibepit/launcher/images/images.hpp"

namespace vibepit::launcher {

struct ImageBuildOptions {
  SandboxImageOptions sandbox = sandbox_options_for_invoker();
  bool quiet = false;
};

int cmd_image_build(const ImageBuildOptions& o, std::ostream& out, std::ostream& err);
int cmd_image_ls(bool json, std::ostream& out, std::ostream& err);
// Remove vibepit's images: the sandbox and proxy images, and with `all` the debootstrap base.
int cmd_image_rm(bool all, std::ostream& out, std::ostream& err);

}  // namespace vibepit::launcher

// Writes a Canvas as an 8-bit RGB PNG (libpng).
#pragma once

#include <filesystem>

#include "eval/plot/canvas.h"

namespace skim::eval {

// Throws skim::Error naming `flag` and the path when the file cannot be written.
void write_png(const Canvas& canvas, const std::filesystem::path& path, const std::string& flag = "--plot");

}  // namespace skim::eval

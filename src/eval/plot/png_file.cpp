#include "eval/plot/png_file.h"

#ifdef SKIM_HAVE_PNG
#include <png.h>
#endif

#include <cstdio>
#include <memory>

#include "core/error.h"

namespace skim::eval {

#ifndef SKIM_HAVE_PNG
void write_png(const Canvas&, const std::filesystem::path& path, const std::string& flag) {
  fail("{}: cannot write '{}': this skim was built without libpng (-DSKIM_PNG=OFF)", flag, path.string());
}
#else
void write_png(const Canvas& canvas, const std::filesystem::path& path, const std::string& flag) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  SKIM_REQUIRE(file != nullptr, "{}: cannot write '{}'", flag, path.string());
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  SKIM_REQUIRE(png != nullptr, "{}: libpng could not start", flag);
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fail("{}: writing '{}' failed", flag, path.string());
  }
  png_init_io(png, file.get());
  png_set_IHDR(png, info, png_uint_32(canvas.width()), png_uint_32(canvas.height()), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const uint8_t* rows = canvas.pixels().data();
  for (int y = 0; y < canvas.height(); ++y)
    png_write_row(png, const_cast<png_bytep>(rows + size_t(y) * canvas.width() * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
}

#endif

}  // namespace skim::eval

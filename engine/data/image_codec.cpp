#include "engine/data/image_codec.h"

#include <png.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "backends/error.h"
#include "backends/host_memory.h"

namespace trainlab {

const char* image_codec_name(ImageCodec codec) {
  switch (codec) {
    case ImageCodec::raw:
      return "raw";
    case ImageCodec::png:
      return "png";
    case ImageCodec::jpeg:
      return "jpeg";
  }
  return "?";
}

const char* image_codec_extension(ImageCodec codec) {
  switch (codec) {
    case ImageCodec::raw:
      return ".raw";
    case ImageCodec::png:
      return ".png";
    case ImageCodec::jpeg:
      return ".jpg";
  }
  return "";
}

ImageCodec parse_image_codec(const std::string& name) {
  for (ImageCodec codec : {ImageCodec::raw, ImageCodec::png, ImageCodec::jpeg}) {
    if (name == image_codec_name(codec)) return codec;
  }
  throw Error("codec " + quote_value(name) + " is not one of raw | png | jpeg");
}

namespace {

std::string size_text(ImageSize s) {
  return std::to_string(s.height) + "x" + std::to_string(s.width) + "x" + std::to_string(s.channels);
}

void check_size(ImageSize s) {
  TL_CHECK(
      s.height >= 1 && s.width >= 1 && s.height <= 65535 && s.width <= 65535 && (s.channels == 1 || s.channels == 3),
      "image size " + size_text(s) + " is not HxWxC with H, W in 1..65535 and C 1 or 3");
}

// One TurboJPEG handle per thread and direction (a handle is not thread-safe; creating one per
// image would cost more than decoding a small image).
struct TjHandle {
  tjhandle handle;
  explicit TjHandle(bool compress) : handle(compress ? tjInitCompress() : tjInitDecompress()) {
    TL_CHECK(handle != nullptr, std::string("JPEG: cannot create a TurboJPEG handle: ") + tjGetErrorStr2(nullptr));
  }
  ~TjHandle() { tjDestroy(handle); }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
};

tjhandle jpeg_handle(bool compress) {
  thread_local TjHandle compressor(true), decompressor(false);
  return compress ? compressor.handle : decompressor.handle;
}

std::vector<unsigned char> encode_jpeg(const unsigned char* pixels, ImageSize s, int quality) {
  TL_CHECK(quality >= 1 && quality <= 100, "JPEG quality " + std::to_string(quality) + " is outside 1..100");
  tjhandle h = jpeg_handle(true);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  const int format = s.channels == 3 ? TJPF_RGB : TJPF_GRAY;
  const int subsampling = s.channels == 3 ? TJSAMP_444 : TJSAMP_GRAY;
  const int status = tjCompress2(h, pixels, s.width, 0, s.height, format, &out, &out_size, subsampling, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(out, [](unsigned char* p) { tjFree(p); });
  TL_CHECK(status == 0, std::string("JPEG: encoding failed: ") + tjGetErrorStr2(h));
  return {out, out + out_size};
}

void decode_jpeg(const unsigned char* bytes, std::size_t size, ImageSize expected, unsigned char* pixels) {
  tjhandle h = jpeg_handle(false);
  TL_CHECK(size <= std::numeric_limits<unsigned long>::max(), "JPEG: image too large");
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(h, bytes, static_cast<unsigned long>(size), &width, &height, &subsampling, &colorspace) != 0)
    throw Error(std::string("JPEG: not a readable JPEG header (") + tjGetErrorStr2(h) + ")");
  const int channels = colorspace == TJCS_GRAY ? 1 : 3;
  const ImageSize found{height, width, channels};
  TL_CHECK(height == expected.height && width == expected.width && channels == expected.channels,
           "JPEG: the image is " + size_text(found) + ", expected " + size_text(expected));
  // A truncated or damaged entropy-coded segment is only a warning to libjpeg (it fills the rest
  // with grey); TJFLAG_STOPONWARNING makes it the error it is for training data.
  const int format = channels == 3 ? TJPF_RGB : TJPF_GRAY;
  if (tjDecompress2(h, bytes, static_cast<unsigned long>(size), pixels, width, 0, height, format,
                    TJFLAG_STOPONWARNING) != 0)
    throw Error(std::string("JPEG: ") + tjGetErrorStr2(h));
}

std::vector<unsigned char> encode_png(const unsigned char* pixels, ImageSize s) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(s.width);
  image.height = static_cast<png_uint_32>(s.height);
  image.format = s.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png_alloc_size_t bytes = 0;
  TL_CHECK(png_image_write_to_memory(&image, nullptr, &bytes, 0, pixels, 0, nullptr) != 0,
           std::string("PNG: encoding failed: ") + image.message);
  std::vector<unsigned char> out(bytes);
  TL_CHECK(png_image_write_to_memory(&image, out.data(), &bytes, 0, pixels, 0, nullptr) != 0,
           std::string("PNG: encoding failed: ") + image.message);
  out.resize(bytes);
  return out;
}

void decode_png(const unsigned char* bytes, std::size_t size, ImageSize expected, unsigned char* pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes, size) == 0)
    throw Error(std::string("PNG: not a readable PNG (") + image.message + ")");
  struct Finish {
    png_image* image;
    ~Finish() { png_image_free(image); }
  } finish{&image};
  const int channels = (image.format & PNG_FORMAT_FLAG_COLOR) != 0 ? 3 : 1;
  const ImageSize found{static_cast<int>(image.height), static_cast<int>(image.width), channels};
  TL_CHECK(found.height == expected.height && found.width == expected.width && channels == expected.channels,
           "PNG: the image is " + size_text(found) + ", expected " + size_text(expected));
  image.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  // libpng reports a truncated or corrupted stream (a CRC or zlib error) as an error here.
  if (png_image_finish_read(&image, nullptr, pixels, 0, nullptr) == 0 || (image.warning_or_error & PNG_IMAGE_ERROR))
    throw Error(std::string("PNG: ") + image.message);
}

}  // namespace

std::vector<unsigned char> encode_image(ImageCodec codec, const unsigned char* pixels, ImageSize size, int quality) {
  check_size(size);
  switch (codec) {
    case ImageCodec::raw:
      return {pixels, pixels + size.bytes()};
    case ImageCodec::png:
      return encode_png(pixels, size);
    case ImageCodec::jpeg:
      return encode_jpeg(pixels, size, quality);
  }
  throw Error("encode_image: unknown codec");
}

void decode_image(ImageCodec codec, const unsigned char* bytes, std::size_t size, ImageSize expected,
                  unsigned char* pixels) {
  check_size(expected);
  switch (codec) {
    case ImageCodec::raw:
      TL_CHECK(size == expected.bytes(), "raw: " + std::to_string(size) + " bytes, expected " +
                                             std::to_string(expected.bytes()) + " (" + size_text(expected) + ")");
      std::memcpy(pixels, bytes, size);
      return;
    case ImageCodec::png:
      return decode_png(bytes, size, expected, pixels);
    case ImageCodec::jpeg:
      return decode_jpeg(bytes, size, expected, pixels);
  }
  throw Error("decode_image: unknown codec");
}

namespace {

// out.pixels sized for its height x width x channels; a failed allocation is an Error saying so.
void allocate_pixels(DecodedImage& out, const char* format) {
  const std::uint64_t bytes = static_cast<std::uint64_t>(out.height) * out.width * out.channels;
  try {
    out.pixels.resize(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    throw Error(allocation_failure(std::string("decoding a ") + format + " of " + std::to_string(out.width) + "x" +
                                       std::to_string(out.height) + " pixels",
                                   bytes));
  }
}

DecodedImage decode_png_file(const unsigned char* bytes, std::size_t size, std::uint64_t max_pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes, size) == 0)
    throw Error(std::string("PNG: not a readable PNG (") + image.message + ")");
  struct Finish {
    png_image* image;
    ~Finish() { png_image_free(image); }
  } finish{&image};
  TL_CHECK((image.format & PNG_FORMAT_FLAG_LINEAR) == 0,
           "PNG: 16 bits per channel; trainlab reads 8-bit images (convert it to 8 bits first)");
  DecodedImage out;
  out.height = static_cast<int>(image.height);
  out.width = static_cast<int>(image.width);
  const bool colour = (image.format & PNG_FORMAT_FLAG_COLOR) != 0, alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  out.channels = (colour ? 3 : 1) + (alpha ? 1 : 0);
  TL_CHECK(static_cast<std::uint64_t>(image.height) * image.width <= max_pixels,
           "PNG: " + std::to_string(image.width) + "x" + std::to_string(image.height) + " pixels, more than the " +
               std::to_string(max_pixels) + " allowed");
  image.format = colour ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB) : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
  allocate_pixels(out, "PNG");
  if (png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr) == 0 ||
      (image.warning_or_error & PNG_IMAGE_ERROR))
    throw Error(std::string("PNG: ") + image.message);
  return out;
}

DecodedImage decode_jpeg_file(const unsigned char* bytes, std::size_t size, std::uint64_t max_pixels) {
  tjhandle h = jpeg_handle(false);
  TL_CHECK(size <= std::numeric_limits<unsigned long>::max(), "JPEG: image too large");
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(h, bytes, static_cast<unsigned long>(size), &width, &height, &subsampling, &colorspace) != 0)
    throw Error(std::string("JPEG: not a readable JPEG header (") + tjGetErrorStr2(h) + ")");
  TL_CHECK(colorspace == TJCS_GRAY || colorspace == TJCS_YCbCr || colorspace == TJCS_RGB,
           "JPEG: a CMYK or YCCK image; trainlab reads grey and RGB JPEGs");
  TL_CHECK(width >= 1 && height >= 1, "JPEG: its header gives no image size (truncated or corrupted)");
  TL_CHECK(static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(height) <= max_pixels,
           "JPEG: " + std::to_string(width) + "x" + std::to_string(height) + " pixels, more than the " +
               std::to_string(max_pixels) + " allowed");
  DecodedImage out;
  out.height = height;
  out.width = width;
  out.channels = colorspace == TJCS_GRAY ? 1 : 3;
  allocate_pixels(out, "JPEG");
  if (tjDecompress2(h, bytes, static_cast<unsigned long>(size), out.pixels.data(), width, 0, height,
                    out.channels == 3 ? TJPF_RGB : TJPF_GRAY, TJFLAG_STOPONWARNING) != 0)
    throw Error(std::string("JPEG: ") + tjGetErrorStr2(h));
  return out;
}

}  // namespace

DecodedImage decode_image_file(const unsigned char* bytes, std::size_t size, std::uint64_t max_pixels) {
  static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= 8 && std::memcmp(bytes, png_magic, 8) == 0) return decode_png_file(bytes, size, max_pixels);
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return decode_jpeg_file(bytes, size, max_pixels);
  throw Error("not a PNG or JPEG file (its first bytes are neither's signature)");
}

double psnr_db(const unsigned char* a, const unsigned char* b, std::size_t count) {
  double sq = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sq += d * d;
  }
  if (sq == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(255.0 * 255.0 / (sq / static_cast<double>(count)));
}

}  // namespace trainlab

// Image codecs for data sets on disk: JPEG (libjpeg-turbo), PNG (libpng) and raw pixels. Images are
// 8-bit, interleaved (height x width x channels, channels 1 or 3), the layout every codec and every
// image file stores. Decoding checks everything it is given: a truncated or corrupted image is an
// Error naming what is wrong (never a partly black image), and a decoded size that differs from the
// expected one is an Error too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainlab {

enum class ImageCodec { raw, png, jpeg };
const char* image_codec_name(ImageCodec codec);         // "raw", "png", "jpeg"
const char* image_codec_extension(ImageCodec codec);    // ".raw", ".png", ".jpg"
ImageCodec parse_image_codec(const std::string& name);  // throws Error listing raw | png | jpeg

struct ImageSize {
  int height = 0, width = 0, channels = 0;
  std::size_t bytes() const { return static_cast<std::size_t>(height) * width * channels; }
};

// `pixels` is size.bytes() bytes, HWC. `quality` (1..100) is JPEG's; PNG and raw are lossless and
// ignore it. JPEG keeps full-resolution chroma (4:4:4): the loss is the quantisation alone.
std::vector<unsigned char> encode_image(ImageCodec codec, const unsigned char* pixels, ImageSize size, int quality);
// Decodes `bytes` into `pixels` (expected.bytes() bytes). Throws Error ("JPEG: Premature end of
// JPEG file", "PNG: 16x16x3, expected 32x32x3", ...) without naming a file: the caller adds it.
void decode_image(ImageCodec codec, const unsigned char* bytes, std::size_t size, ImageSize expected,
                  unsigned char* pixels);

// An image file of any size, PNG or JPEG (told by its first bytes), as 8-bit HWC pixels with the
// file's own channels: 1 grey, 2 grey and alpha, 3 RGB, 4 RGBA. Throws Error for what is not one
// (a 16-bit PNG, a CMYK JPEG, another format, a truncated or corrupted file, more than max_pixels).
struct DecodedImage {
  int height = 0, width = 0, channels = 0;
  std::vector<unsigned char> pixels;
};
DecodedImage decode_image_file(const unsigned char* bytes, std::size_t size, std::uint64_t max_pixels);

// Peak signal-to-noise ratio of `b` against `a` in dB (8-bit peak 255); infinity when equal.
double psnr_db(const unsigned char* a, const unsigned char* b, std::size_t count);

}  // namespace trainlab

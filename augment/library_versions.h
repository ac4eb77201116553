// The versions of the libraries heterodl decodes and resizes with, for
// reports that compare it with peers (`bench augment`): a figure beside a
// peer's means little without what each side ran.
//
//   std::string line = DecoderLibraryVersions();
//   // "OpenCV 4.6.0, libjpeg-turbo 2.1.5, libpng 1.6.39, libdeflate 1.14, libwebp 1.2.4"
#ifndef HETERODL_AUGMENT_LIBRARY_VERSIONS_H_
#define HETERODL_AUGMENT_LIBRARY_VERSIONS_H_

#include <string>

namespace heterodl {

// The loaded libraries' own versions where they report one (OpenCV, libpng,
// libwebp), the headers' where they do not (libjpeg-turbo 2.x, libdeflate).
std::string DecoderLibraryVersions();

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_LIBRARY_VERSIONS_H_

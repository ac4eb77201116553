// Detection boxes through geometric operations: a box follows its image as
// torchvision.transforms.v2 moves a tv_tensors.BoundingBoxes, its corners
// mapped as the pixels are and the box made their axis-aligned hull again
// (a rotation grows it), then clipped to the image after every operation.
//
//   MovingBoxes boxes({{10, 20, 50, 80}});
//   boxes.Move(affine, output_size);  // after each geometric operation
//   boxes.Kept(1.0, 0.0, &kept_boxes, &kept_indices);
#ifndef HETERODL_AUGMENT_BOXES_H_
#define HETERODL_AUGMENT_BOXES_H_

#include <vector>

#include "opencv2/core/matx.hpp"
#include "opencv2/core/types.hpp"

namespace heterodl {

// xyxy in pixels, the image spanning [0, width] x [0, height] (COCO's and
// torchvision's convention: a box of one pixel is 1 wide).
struct Box {
  float x1 = 0;
  float y1 = 0;
  float x2 = 0;
  float y2 = 0;
  float width() const { return x2 - x1; }
  float height() const { return y2 - y1; }
};

// An operation's map of coordinates, input pixels to output pixels.
using Affine = cv::Matx23d;
Affine IdentityAffine();
Affine ScalingAffine(cv::Size from, cv::Size to);
Affine TranslationAffine(double dx, double dy);
// `first`, then `second`.
Affine ThenAffine(const Affine& first, const Affine& second);

class MovingBoxes {
 public:
  explicit MovingBoxes(std::vector<Box> boxes);

  // The image moved by `affine` into one of `output` size: every box's
  // corners too, then clipped to [0, width] x [0, height].
  void Move(const Affine& affine, cv::Size output);

  // The boxes at least `min_size` pixels wide and high whose area is at
  // least `min_visibility` of what it would be unclipped (the part of the
  // object still in the image), in input order, and which input box each
  // one is.
  void Kept(double min_size, double min_visibility, std::vector<Box>* boxes,
            std::vector<int>* indices) const;

 private:
  std::vector<Box> clipped_;
  // The same boxes moved without clipping, for the visible fraction.
  std::vector<Box> unclipped_;
};

}  // namespace heterodl

#endif  // HETERODL_AUGMENT_BOXES_H_

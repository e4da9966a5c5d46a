// ART's stability test between two running outputs of one query head (attention/
// art_decode_args.h): stable when the relative change of the norm is below eps_scale and
// 1 - cos is below eps_dir, on the GPU kernel's 32-element probe (art_probe_dim) or on the whole
// vector; never when either norm is 0 (an empty state: nothing to compare). Double sums.
#pragma once

#include <cmath>
#include <vector>

#include "attention/art_decode_args.h"

namespace skim::cpu {

class ArtStability {
 public:
  ArtStability(int d, bool probe) {
    if (probe)
      for (int e = 0; e < kArtProbe; ++e) dims_.push_back(art_probe_dim(e, d));
    else
      for (int i = 0; i < d; ++i) dims_.push_back(i);
  }
  bool stable(const float* prev, const float* cur, double eps_scale, double eps_dir) const {
    double dot = 0;
    for (int i : dims_) dot += double(prev[i]) * cur[i];
    const double np = norm(prev), nc = norm(cur);
    if (np <= 0 || nc <= 0) return false;
    return std::fabs(nc - np) / np < eps_scale && 1.0 - dot / (np * nc) < eps_dir;
  }

 private:
  double norm(const float* v) const {
    double s = 0;
    for (int i : dims_) s += double(v[i]) * v[i];
    return std::sqrt(s);
  }
  std::vector<int> dims_;
};

}  // namespace skim::cpu

// matmul with K-quant weights (q4_k, q5_k, q6_k), and q4_0's direct kernel: cuda/matmul_kquant.cu.
// matmul.cu's plan and launch hand these nodes over here.
#pragma once

#include "sift_cuda.h"

namespace sift_cuda {

// Whether the direct kernel takes a matmul node: one token, K % 256 == 0, 16-byte aligned rows. It
// takes q4_0 weights too (matmul.cu hands those over where it does).
bool kquant_direct_takes(const sift_node *n);
// The plan (path, rows_per_block) and the launch of a matmul node whose w is a K-quant (or q4_0
// that the direct kernel takes).
cudaError_t kquant_matmul_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan);
cudaError_t kquant_matmul_launch(const sift_cuda_device *dev, const sift_node *n, const sift_cuda_plan *plan,
                                 void *scratch, cudaStream_t st);

} // namespace sift_cuda

// matmul with K-quant weights (q4_k, q5_k, q6_k): cuda/matmul_kquant.cu. matmul.cu's plan and
// launch hand these weight types over here.
#pragma once

#include "sift_cuda.h"

namespace sift_cuda {

// The plan (path, rows_per_block) and the launch of a matmul node whose w is a K-quant.
cudaError_t kquant_matmul_plan(const sift_cuda_device *dev, const sift_node *n, sift_cuda_plan *plan);
cudaError_t kquant_matmul_launch(const sift_cuda_device *dev, const sift_node *n, const sift_cuda_plan *plan,
                                 void *scratch, cudaStream_t st);

} // namespace sift_cuda

"""Real device kernel and activity names, as CUDA/cuBLAS/FlashAttention/NCCL builds write them.

Taken from real PyTorch profiler traces, so a planted trace exercises the same name rules
(``tracekit/data/kernels.toml``) a real one does. Plain strings: use them with
:meth:`tracekit.testing.TraceBuilder.kernel` or as templates for your own.
"""

from __future__ import annotations

__all__ = [
    "BMM",
    "GEMMS",
    "GEMM_A",
    "GEMM_B",
    "GEMM_C",
    "GEMM_NN",
    "GEMM_NT",
    "K_ADAM",
    "K_ADD",
    "K_CAT",
    "K_COPY",
    "K_COS",
    "K_DIV",
    "K_EMB_BW",
    "K_EMB_SORT",
    "K_FILL",
    "K_FLASH_BWD",
    "K_FLASH_BWD_DOT",
    "K_FLASH_FWD",
    "K_INDEX",
    "K_LOGSOFTMAX",
    "K_LOGSOFTMAX_BW",
    "K_MEAN",
    "K_MUL",
    "K_NEG",
    "K_NLL",
    "K_NLL_BW",
    "K_POW",
    "K_RSQRT",
    "K_SILU",
    "K_SILU_BW",
    "K_SIN",
    "K_SOFTMAX",
    "K_SOFTMAX_BW",
    "K_SUM",
    "MATMUL_CUSTOM",
    "MEMCPY_DTOD",
    "MEMCPY_DTOH",
    "MEMCPY_HTOD",
    "MEMSET",
    "NCCL_AG",
    "NCCL_AR",
    "NCCL_GENERIC",
    "NCCL_KERNELS",
]

GEMM_A = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
    "_execute_segment_k_off_kernel__5x_cublas"
)
GEMM_B = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT"
GEMM_C = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
GEMM_NN = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nn"
GEMM_NT = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_warpgroupsize2x1x1"
    "_execute_segment_k_off_kernel__5x_cublas"
)
BMM = (
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
    "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)"
)
#: A hand-written GEMM of a custom CUDA extension (no library name: its own name says matmul).
MATMUL_CUSTOM = "matmul_k(float const*, float const*, float*, int, int, int)"
GEMMS = frozenset({GEMM_A, GEMM_B, GEMM_C, GEMM_NN, GEMM_NT, BMM, MATMUL_CUSTOM})


def _ew(functor: str, n: int = 3) -> str:
    t = "c10::BFloat16"
    f = f"at::native::BinaryFunctor<{t}, {t}, {t}, {functor}>"
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >"
        f"(int, {f}, std::array<char*, {n}ul>)"
    )


def _un(functor: str) -> str:
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, 2ul> >"
        f"(int, {functor}, std::array<char*, 2ul>)"
    )


K_MUL = _ew("at::native::binary_internal::MulFunctor<float>")
K_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
K_DIV = _ew("at::native::binary_internal::DivFunctor<float>")
K_NEG = _un(
    "at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const"
    "::{lambda()#8}::operator()() const::{lambda(c10::BFloat16)#1}"
)
K_CAT = (
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::"
    "(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>(at::native::(anonymous namespace)"
    "::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::"
    "(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)"
    "::TensorSizeStride<unsigned int, 4u>, int, unsigned int)"
)
K_COPY = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::"
    "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>"
    "(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)"
    "::{lambda(int)#1})"
)
K_POW = _un(
    "at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::"
    "TensorIteratorBase&, float)::{lambda(float)#2}"
)
K_MEAN = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
    "float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::"
    "MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)"
)
K_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t"
    "<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
    "{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
    "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)"
)
K_RSQRT = _un(
    "at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const"
    "::{lambda()#2}::operator()() const::{lambda(float)#1}"
)
K_SILU = _un(
    "at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::"
    "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}"
)
K_SILU_BW = _ew(
    "at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::"
    "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16, c10::BFloat16)#1}"
)
K_COS = _un(
    "at::native::cos_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
    "{lambda()#2}::operator()() const::{lambda(float)#1}"
)
K_SIN = _un(
    "at::native::sin_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
    "{lambda()#2}::operator()() const::{lambda(float)#1}"
)
K_FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)"
)
K_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
)
K_SOFTMAX_BW = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, "
    "float const*, long)"
)
K_INDEX = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned "
    "int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::"
    "detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, "
    "unsigned int>, int, int, unsigned int, unsigned int, long)"
)
K_EMB_BW = (
    "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, "
    "float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)"
)
K_EMB_SORT = (
    "void at::native::(anonymous namespace)::compute_num_of_partial_segments<long>(long const*, "
    "long const*, long const*, long*)"
)
K_LOGSOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
)
K_LOGSOFTMAX_BW = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, "
    "float const*, long)"
)
K_NLL = (
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, "
    "long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
)
K_NLL_BW = (
    "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>"
    "(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"
)
K_FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, "
    "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, "
    "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::"
    "Flash_fwd_params)"
)
K_FLASH_BWD_DOT = (
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits"
    "<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::"
    "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::"
    "Flash_bwd_params)"
)
K_FLASH_BWD = (
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
    "Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
    "pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, true, "
    "false, false, false, true, true, false>(pytorch_flash::Flash_bwd_params)"
)
K_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, "
    "4, (at::native::ADAM_MODE)0, false>, double*, double, double, double, double, double, bool, "
    "float const*, float const*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::"
    "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, double*, "
    "double, double, double, double, double, bool, float const*, float const*)"
)
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_GENERIC = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"

MEMCPY_HTOD = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_DTOD = "Memcpy DtoD (Device -> Device)"
MEMSET = "Memset (Device)"
MEMCPY_DTOH = "Memcpy DtoH (Device -> Pinned)"

# The NCCL device kernel a collective launches (by tracekit's collective names); others launch
# NCCL_GENERIC, whose collective only the launching record_param_comms names.
NCCL_KERNELS = {
    "AllReduce": NCCL_AR,
    "AllGather": NCCL_AG,
    "ReduceScatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "Broadcast": "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "SendRecv": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
}

#: The device properties a real H100 trace records (``deviceProperties``).
H100 = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85020819456,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}

#: Old Kineto (torch 1.8-1.13) category names; runtime API callback ids; launch and device kinds.
_OLD_CATS = {
    "cpu_op": "Operator",
    "cuda_runtime": "Runtime",
    "cuda_driver": "Driver",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}
_CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cuLaunchKernelEx": 652,
    "cudaLaunchKernelExC": 430,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaStreamSynchronize": 131,
    "hipLaunchKernel": 0,
}
_DEFAULT_API = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}
_DEVICE_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}

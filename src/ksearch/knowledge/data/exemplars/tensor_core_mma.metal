// simdgroup_matrix MMA: one SIMD-group owns a 16x8 tile of C (two 8x8 accumulators that share each B block; the
// CUDA exemplar's m16n8 tile, so one launch of M/16 * N/8 SIMD-groups covers C in both dialects). A and B 8x8 blocks
// are staged as float in threadgroup memory (fp32 fragments, as MLX's steel GEMM does) and multiplied with
// simdgroup_multiply_accumulate. Needs M % 16 == 0, N % 8 == 0, K % 8 == 0.
uint sgi = simdgroup_index_in_threadgroup;
uint lane = thread_index_in_simdgroup;
int sg = (int)(threadgroup_position_in_grid.x * (TPB / 32) + sgi);
int M = a_shape[0], K = a_shape[1], N = b_shape[1];
int tiles_n = N / 8;
int tm = sg / tiles_n, tn = sg % tiles_n;
threadgroup float As[TPB / 32][128];
threadgroup float Bs[TPB / 32][64];
threadgroup float Cs[TPB / 32][128];
if (tm * 16 >= M) return;  // whole SIMD-groups leave together; only SIMD-group barriers follow
simdgroup_matrix<float, 8, 8> acc0 = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
simdgroup_matrix<float, 8, 8> acc1 = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
for (int k0 = 0; k0 < K; k0 += 8) {
  for (uint e = lane; e < 128; e += 32) {
    uint r = e / 8, q = e % 8;
    As[sgi][e] = (float)a[(size_t)(tm * 16 + r) * K + k0 + q];
  }
  for (uint e = lane; e < 64; e += 32) {
    uint r = e / 8, q = e % 8;
    Bs[sgi][e] = (float)b[(size_t)(k0 + r) * N + tn * 8 + q];
  }
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_matrix<float, 8, 8> A0, A1, B;
  simdgroup_load(A0, &As[sgi][0], 8);
  simdgroup_load(A1, &As[sgi][64], 8);
  simdgroup_load(B, &Bs[sgi][0], 8);
  simdgroup_multiply_accumulate(acc0, A0, B, acc0);
  simdgroup_multiply_accumulate(acc1, A1, B, acc1);
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
simdgroup_store(acc0, &Cs[sgi][0], 8);
simdgroup_store(acc1, &Cs[sgi][64], 8);
simdgroup_barrier(mem_flags::mem_threadgroup);
for (uint e = lane; e < 128; e += 32) c[(size_t)(tm * 16 + e / 8) * N + tn * 8 + e % 8] = (T)Cs[sgi][e];

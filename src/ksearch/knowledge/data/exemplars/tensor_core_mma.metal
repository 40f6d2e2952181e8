// simdgroup_matrix MMA: one SIMD-group owns an 8x8 tile of C; A and B 8x8 blocks are staged as float in
// threadgroup memory (fp32 fragments, as MLX's steel GEMM does) and multiplied with simdgroup_multiply_accumulate.
// Needs M, N, K multiples of 8.
uint sgi = simdgroup_index_in_threadgroup;
uint lane = thread_index_in_simdgroup;
int sg = (int)(threadgroup_position_in_grid.x * (TPB / 32) + sgi);
int M = a_shape[0], K = a_shape[1], N = b_shape[1];
int tiles_n = N / 8;
int tm = sg / tiles_n, tn = sg % tiles_n;
threadgroup float As[TPB / 32][64];
threadgroup float Bs[TPB / 32][64];
threadgroup float Cs[TPB / 32][64];
if (tm * 8 >= M) return;  // whole SIMD-groups leave together; only SIMD-group barriers follow
simdgroup_matrix<float, 8, 8> acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
for (int k0 = 0; k0 < K; k0 += 8) {
  for (uint e = lane; e < 64; e += 32) {
    uint r = e / 8, q = e % 8;
    As[sgi][e] = (float)a[(size_t)(tm * 8 + r) * K + k0 + q];
    Bs[sgi][e] = (float)b[(size_t)(k0 + r) * N + tn * 8 + q];
  }
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_matrix<float, 8, 8> A, B;
  simdgroup_load(A, &As[sgi][0], 8);
  simdgroup_load(B, &Bs[sgi][0], 8);
  simdgroup_multiply_accumulate(acc, A, B, acc);
  simdgroup_barrier(mem_flags::mem_threadgroup);
}
simdgroup_store(acc, &Cs[sgi][0], 8);
simdgroup_barrier(mem_flags::mem_threadgroup);
for (uint e = lane; e < 64; e += 32) c[(size_t)(tm * 8 + e / 8) * N + tn * 8 + e % 8] = (T)Cs[sgi][e];

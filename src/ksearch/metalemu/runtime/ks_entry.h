// ksearch Metal emulation: how a translated kernel is entered. For each kernel the translator emits
//   extern "C" void ks_entry_N(const ks::Launch*, const ks::Attrs*)  runs one thread
//   extern "C" void ks_desc_N(int*)                                  describes the buffer parameters
// both through `invoke`/`describe`, which read the kernel's own parameter types (templates included).
#pragma once
#include "ks_mlx.h"

namespace ks {
template <int I> struct B {};   // the parameter bound to [[buffer(I)]]
template <int K> struct AT {};  // the parameter bound to Metal attribute K (the order of Attrs)

template <class T> struct is_dptr : false_type {};
template <class T> struct is_dptr<dptr<T>> : true_type { typedef T elem; };

template <int K> KS_INLINE const u32* attr_ptr(const Attrs* A) {
  const u32* base[] = {A->thread_position_in_grid, A->thread_position_in_threadgroup, A->threadgroup_position_in_grid,
                       A->threads_per_threadgroup, A->threads_per_grid, A->threadgroups_per_grid,
                       A->dispatch_threads_per_threadgroup, A->grid_origin, A->grid_size,
                       &A->thread_index_in_threadgroup, &A->thread_index_in_simdgroup,
                       &A->simdgroup_index_in_threadgroup, &A->simdgroups_per_threadgroup, &A->threads_per_simdgroup,
                       &A->thread_execution_width, &A->thread_index_in_quadgroup, &A->quadgroup_index_in_threadgroup,
                       &A->quadgroups_per_threadgroup, &A->dispatch_simdgroups_per_threadgroup,
                       &A->dispatch_quadgroups_per_threadgroup};
  return base[K];
}
template <class P, int I> KS_INLINE P arg(const Launch* L, const Attrs*, B<I>) {
  typedef decay_t<P> D;
  const Buf& b = L->bufs[I];
  if constexpr (is_dptr<D>::value) {
    typedef typename is_dptr<D>::elem E;
    return D((E*)b.ptr, b.ptr, b.ptr + b.bytes);
  } else {
    return *(remove_reference_t<P>*)b.ptr;
  }
}
template <class P, int K> KS_INLINE P arg(const Launch*, const Attrs* A, AT<K>) {
  const u32* v = attr_ptr<K>(A);
  typedef decay_t<P> D;
  if constexpr (vinfo<D>::is) {
    D r;
    for (int i = 0; i < vinfo<D>::n; ++i) r[i] = (typename vinfo<D>::elem)v[i];
    return r;
  } else {
    return (D)v[0];
  }
}
template <class... Ps, class... Ds>
KS_INLINE void invoke(void (*f)(Ps...), const Launch* L, const Attrs* A, Ds... ds) {
  f(arg<Ps>(L, A, ds)...);
}

template <class T> struct atomic_of { typedef T type; static constexpr int flag = 0; };
template <class T> struct atomic_of<atomic_cell<T>> { typedef T type; static constexpr int flag = 0x10000; };
// Per buffer parameter: [0] 1 pointer / 2 reference, [1] element type code (kind | size << 8 | atomic 0x10000),
// [2] 1 when the kernel may write it.
template <class P, int I> KS_INLINE void desc(int* out, B<I>) {
  typedef decay_t<P> D;
  typedef conditional_t<is_dptr<D>::value, typename is_dptr<D>::elem, remove_reference_t<P>> E;
  typedef remove_cv_t<E> U;
  out[3 * I + 0] = is_dptr<D>::value ? 1 : 2;
  out[3 * I + 1] = (atomic_of<U>::flag | type_code<typename atomic_of<U>::type>()) & ~0xFF00 |
                   (int)(sizeof(U) << 8);
  out[3 * I + 2] = is_const<E>::value ? 0 : 1;
}
template <class P, int K> KS_INLINE void desc(int*, AT<K>) {}
template <class... Ps, class... Ds> KS_INLINE void describe(void (*)(Ps...), int* out, Ds... ds) {
  (desc<Ps>(out, ds), ...);
}
}  // namespace ks

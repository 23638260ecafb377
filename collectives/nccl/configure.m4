# collectives/nccl/configure.m4 — CUDA and NCCL detection (libfabric-style:
# each optional backend owns its configure fragment).
#   --with-cuda[=DIR]   yes: required; no: disabled; default: auto (/usr/local/cuda)
#   --with-nccl[=DIR]   likewise (default DIR: the CUDA directory)
# Defines ACX_HAVE_CUDA / ACX_HAVE_NCCL to 0 or 1 (always defined; test with #if).
# CUDA means the runtime API (cuda_runtime_api.h, -lcudart) and nvcc, which
# compiles device/*.cu (Makefile.am: NVCC, ACX_NVCCFLAGS; NVCCFLAGS is the
# user's). -lcuda is never linked: only a stub exists on machines without a
# driver, and a program linked to it does not start there.
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA toolkit (default: auto-detect in /usr/local/cuda)])],
  [], [with_cuda=auto])
AC_ARG_WITH([nccl],
  [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@], [NCCL (default: auto-detect next to CUDA)])],
  [], [with_nccl=auto])

acx_have_cuda=0; acx_have_nccl=0
acx_cuda_summary=no; acx_nccl_summary=no; acx_backends_extra=
CUDA_CPPFLAGS=; CUDA_LDFLAGS=; CUDA_RPATH=; CUDA_LIBS=; NCCL_LIBS=; ACX_NVCCFLAGS=
AC_ARG_VAR([NVCC], [CUDA compiler (default: DIR/bin/nvcc of --with-cuda)])
AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc])

AS_CASE([$with_cuda],
  [no], [],
  [yes|auto], [acx_cuda_dir=/usr/local/cuda],
  [acx_cuda_dir=$with_cuda])
AS_IF([test "x$with_cuda" != xno], [
  acx_save_CPPFLAGS=$CPPFLAGS; acx_save_LDFLAGS=$LDFLAGS; acx_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS -I$acx_cuda_dir/include"; LDFLAGS="$LDFLAGS -L$acx_cuda_dir/lib64"
  AC_CHECK_HEADER([cuda_runtime_api.h],
    [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [acx_have_cuda=1])], [], [AC_INCLUDES_DEFAULT])
  CPPFLAGS=$acx_save_CPPFLAGS; LDFLAGS=$acx_save_LDFLAGS; LIBS=$acx_save_LIBS
  acx_cuda_missing="cuda_runtime_api.h/libcudart were not found in $acx_cuda_dir"
  AS_IF([test $acx_have_cuda = 1], [
    AC_PATH_PROG([NVCC], [nvcc], [no], [$acx_cuda_dir/bin$PATH_SEPARATOR$PATH])
    AS_IF([test "x$NVCC" = xno], [acx_have_cuda=0; acx_cuda_missing="nvcc was not found in $acx_cuda_dir/bin or PATH"])
  ])
  AS_IF([test $acx_have_cuda = 1], [
    # sm_80 (A100) and sm_90 (H100/H200) machine code, plus compute_90 PTX
    # that the driver compiles for newer GPUs. Host code: -fPIC (the objects
    # go into libacx.so), hidden visibility like the C code.
    ACX_NVCCFLAGS="-O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -Xcompiler -fPIC,-fvisibility=hidden,-Wall"
    AC_MSG_CHECKING([whether $NVCC compiles for sm_80 and sm_90])
    cat >conftest.cu <<_ACEOF
__global__ void acx_conftest(float *x) { x@<:@threadIdx.x@:>@ += 1.0f; }
_ACEOF
    AS_IF([$NVCC $ACX_NVCCFLAGS $NVCCFLAGS -c conftest.cu -o conftest.$OBJEXT >&AS_MESSAGE_LOG_FD 2>&1],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); acx_have_cuda=0; acx_cuda_missing="$NVCC cannot compile for sm_80/sm_90 (see config.log)"])
    rm -f conftest.cu conftest.$OBJEXT
  ])
  AS_IF([test $acx_have_cuda = 1], [
      AS_IF([test "x$enable_werror" = xyes], [ACX_NVCCFLAGS="$ACX_NVCCFLAGS -Werror all-warnings -Xcompiler -Werror"])
      # -isystem: warnings in the foreign headers (nccl.h declares f()
      # without void) are not ours to fix under -Werror
      CUDA_CPPFLAGS="-isystem $acx_cuda_dir/include"
      CUDA_LDFLAGS="-L$acx_cuda_dir/lib64"
      # the run-time path goes on the linked library and programs
      # (Makefile.am: AM_LDFLAGS, libacx_la_LDFLAGS), not on the
      # convenience library, whose link flags libtool does not pass on
      CUDA_RPATH="-Wl,-rpath,$acx_cuda_dir/lib64"
      # nvcc's host objects need the C++ runtime when linked by the C compiler
      CUDA_LIBS="-lcudart -lstdc++"
      acx_cuda_summary="yes ($acx_cuda_dir; nvcc $NVCC; kernels for sm_80, sm_90 + PTX)"],
    [test "x$with_cuda" != xauto],
      [AC_MSG_ERROR([--with-cuda=$with_cuda requested but $acx_cuda_missing])],
    [acx_cuda_summary="no ($acx_cuda_missing)"])
])

AS_CASE([$with_nccl],
  [no], [],
  [yes|auto], [acx_nccl_dir=${acx_cuda_dir:-/usr/local/cuda}],
  [acx_nccl_dir=$with_nccl])
AS_IF([test "x$with_nccl" != xno && test $acx_have_cuda = 0 && test "x$with_nccl" != xauto],
  [AC_MSG_ERROR([--with-nccl needs CUDA, which was not found or disabled])])
AS_IF([test "x$with_nccl" != xno && test $acx_have_cuda = 1], [
  acx_save_CPPFLAGS=$CPPFLAGS; acx_save_LDFLAGS=$LDFLAGS; acx_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS -I$acx_nccl_dir/include $CUDA_CPPFLAGS"; LDFLAGS="$LDFLAGS -L$acx_nccl_dir/lib64 -L$acx_nccl_dir/lib $CUDA_LDFLAGS"
  AC_CHECK_HEADER([nccl.h], [AC_CHECK_LIB([nccl], [ncclGetUniqueId], [acx_have_nccl=1], [], [-lcudart])], [], [AC_INCLUDES_DEFAULT])
  CPPFLAGS=$acx_save_CPPFLAGS; LDFLAGS=$acx_save_LDFLAGS; LIBS=$acx_save_LIBS
  AS_IF([test $acx_have_nccl = 1], [
      AS_IF([test "$acx_nccl_dir" != "$acx_cuda_dir"], [CUDA_CPPFLAGS="$CUDA_CPPFLAGS -isystem $acx_nccl_dir/include"; CUDA_LDFLAGS="$CUDA_LDFLAGS -L$acx_nccl_dir/lib64 -L$acx_nccl_dir/lib"; CUDA_RPATH="$CUDA_RPATH -Wl,-rpath,$acx_nccl_dir/lib64 -Wl,-rpath,$acx_nccl_dir/lib"])
      NCCL_LIBS="-lnccl"
      acx_nccl_summary="yes ($acx_nccl_dir)"
      acx_backends_extra=", nccl"],
    [test "x$with_nccl" != xauto],
      [AC_MSG_ERROR([--with-nccl=$with_nccl requested but nccl.h/libnccl were not found in $acx_nccl_dir])])
])
AC_DEFINE_UNQUOTED([ACX_HAVE_CUDA], [$acx_have_cuda], [CUDA runtime available])
AC_DEFINE_UNQUOTED([ACX_HAVE_NCCL], [$acx_have_nccl], [NCCL available])
AM_CONDITIONAL([ACX_HAVE_CUDA], [test $acx_have_cuda = 1])
AM_CONDITIONAL([ACX_HAVE_NCCL], [test $acx_have_nccl = 1])
AC_SUBST([CUDA_CPPFLAGS]) AC_SUBST([CUDA_LDFLAGS]) AC_SUBST([CUDA_RPATH]) AC_SUBST([CUDA_LIBS]) AC_SUBST([NCCL_LIBS])
AC_SUBST([ACX_NVCCFLAGS])

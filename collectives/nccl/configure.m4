# collectives/nccl/configure.m4 — CUDA and NCCL detection (libfabric-style:
# each optional backend owns its configure fragment).
#   --with-cuda[=DIR]   yes: required; no: disabled; default: auto (/usr/local/cuda)
#   --with-nccl[=DIR]   likewise (default DIR: the CUDA directory)
# Defines ACX_HAVE_CUDA / ACX_HAVE_NCCL to 0 or 1 (always defined; test with #if).
AC_ARG_WITH([cuda],
  [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA toolkit (default: auto-detect in /usr/local/cuda)])],
  [], [with_cuda=auto])
AC_ARG_WITH([nccl],
  [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@], [NCCL (default: auto-detect next to CUDA)])],
  [], [with_nccl=auto])

acx_have_cuda=0; acx_have_nccl=0
acx_cuda_summary=no; acx_nccl_summary=no; acx_backends_extra=
CUDA_CPPFLAGS=; CUDA_LDFLAGS=; CUDA_LIBS=; NCCL_LIBS=

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
  AS_IF([test $acx_have_cuda = 1], [
      CUDA_CPPFLAGS="-I$acx_cuda_dir/include"
      CUDA_LDFLAGS="-L$acx_cuda_dir/lib64 -Wl,-rpath,$acx_cuda_dir/lib64"
      CUDA_LIBS="-lcudart"
      acx_cuda_summary="yes ($acx_cuda_dir)"],
    [test "x$with_cuda" != xauto],
      [AC_MSG_ERROR([--with-cuda=$with_cuda requested but cuda_runtime_api.h/libcudart were not found in $acx_cuda_dir])])
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
      AS_IF([test "$acx_nccl_dir" != "$acx_cuda_dir"], [CUDA_CPPFLAGS="$CUDA_CPPFLAGS -I$acx_nccl_dir/include"; CUDA_LDFLAGS="$CUDA_LDFLAGS -L$acx_nccl_dir/lib64 -L$acx_nccl_dir/lib"])
      NCCL_LIBS="-lnccl"
      acx_nccl_summary="detected ($acx_nccl_dir); the NCCL backend is not implemented yet"],
    [test "x$with_nccl" != xauto],
      [AC_MSG_ERROR([--with-nccl=$with_nccl requested but nccl.h/libnccl were not found in $acx_nccl_dir])])
])
AC_DEFINE_UNQUOTED([ACX_HAVE_CUDA], [$acx_have_cuda], [CUDA runtime available])
AC_DEFINE_UNQUOTED([ACX_HAVE_NCCL], [$acx_have_nccl], [NCCL available])
AM_CONDITIONAL([ACX_HAVE_CUDA], [test $acx_have_cuda = 1])
AM_CONDITIONAL([ACX_HAVE_NCCL], [test $acx_have_nccl = 1])
AC_SUBST([CUDA_CPPFLAGS]) AC_SUBST([CUDA_LDFLAGS]) AC_SUBST([CUDA_LIBS]) AC_SUBST([NCCL_LIBS])

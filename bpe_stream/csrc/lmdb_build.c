/*
 * lmdb_build.c -- the vendored LMDB (lmdb/: the release py-lmdb bundles, with the patches it
 * applies; see lmdb/README) compiled into this extension as one unit, with its assertions on
 * as py-lmdb builds it (-UNDEBUG): a damaged page then stops the process instead of being
 * written on.  Only storewrite.c calls it.  The warnings are LMDB's own, not ours to fix.
 */
#undef NDEBUG
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
#include "lmdb/mdb.c"
#include "lmdb/midl.c"

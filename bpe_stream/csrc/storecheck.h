/*
 * storecheck.h: the structure of an LMDB data file checked before LMDB walks it (see
 * storecheck.c for what is checked and why).
 */
#ifndef BPE_STREAM_STORECHECK_H
#define BPE_STREAM_STORECHECK_H

#include <stddef.h>
#include <stdint.h>

/* 0: the snapshot `txnid` of the file mapped at base[0..len) is consistent; 1: its meta page
 * was rewritten meanwhile (take a new snapshot); BS_NO_MEMORY; BS_BAD_ROW with the first
 * damage found written (NUL-terminated) into error[0..error_size). */
int bs_store_check(const uint8_t *base, uint64_t len, uint64_t txnid, char *error, size_t error_size);

#endif

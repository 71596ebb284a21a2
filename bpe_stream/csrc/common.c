/* common.c: the 32-bit limit and the status texts (see common.h). */
#include "common.h"

uint32_t bs_limit32 = BS_NONE - 1;

const char *bs_status_text(int status) {
    switch (status) {
    case BS_OK: return "no error";
    case BS_NO_MEMORY: return "out of memory";
    case BS_TOO_LARGE: return "more items than 32-bit counts hold";
    case BS_UNKNOWN_SYMBOL: return "a symbol id without a token";
    case BS_BAD_WORD_ENDS: return "word ends must increase and end at the last symbol";
    case BS_UNKNOWN_TIE_BREAK: return "unknown tie-break";
    case BS_BAD_ROW: return "a sequence-table row is damaged";
    case BS_OUT_OF_ORDER: return "called out of order";
    case BS_BAD_ARGUMENT: return "an argument out of range";
    /* the same words as merge_engine.COUNT_OVERFLOW, which the Python engine raises */
    case BS_COUNT_OVERFLOW: return "the pair counts of these words pass 2**63-1, the limit of the merge loop's 64-bit counts";
    case BS_NO_DISK: return "a scratch file could not grow";
    default: return "unknown error";
    }
}

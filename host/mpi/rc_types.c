/* Datatypes by their typemap (rc_internal.h): which layouts the engine moves as they are, how
 * the others are packed into a staging buffer and unpacked after, and which predefined types and
 * operations the engine reduces — plus the count of the path each call took.
 *
 * A run: `count` elements of a type whose data is one run of bytes in typemap order from the
 * buffer's address — a named type with lower bound 0 and extent = size, or a contiguous, dup or
 * resized type of a run with the same property at every level (docs/mpi.md, "Datatypes"). Such
 * data is copied; anything else (padded pairs such as MPI_DOUBLE_INT, size 12 and extent 16;
 * vectors, structs, MPI_BOTTOM with absolute displacements) is packed with PMPI_Pack into the
 * staging buffer and unpacked with PMPI_Unpack: the engine moves the type signature's bytes,
 * which is what every rank of a correct program agrees on, whatever layout each one has. */
#include "rc_internal.h"

#include <float.h>

/* Nesting followed before a type is packed instead of judged (a run is rarely deeper). */
#define RC_TYPE_DEPTH 8

/* Whether `t` is a predefined (named) type: those are never freed. */
static int rc_named(MPI_Datatype t) {
    int ni, na, nd, comb;
    return PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) == MPI_SUCCESS && comb == MPI_COMBINER_NAMED;
}

static int rc_run_at(MPI_Datatype t, int depth) {
    int ni, na, nd, comb, size;
    MPI_Aint lb, extent, tlb, textent;
    if (depth > RC_TYPE_DEPTH || PMPI_Type_get_envelope(t, &ni, &na, &nd, &comb) != MPI_SUCCESS) return 0;
    if (PMPI_Type_size(t, &size) != MPI_SUCCESS || PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(t, &tlb, &textent) != MPI_SUCCESS)
        return 0;
    if (lb != 0 || tlb != 0 || extent != size || textent != size) return 0;
    if (comb == MPI_COMBINER_NAMED) return 1;
    if ((comb != MPI_COMBINER_CONTIGUOUS && comb != MPI_COMBINER_DUP && comb != MPI_COMBINER_RESIZED) || ni > 1 || na > 2 ||
        nd != 1)
        return 0;
    int ints[1];
    MPI_Aint addrs[2];
    MPI_Datatype inner;
    if (PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, &inner) != MPI_SUCCESS) return 0;
    int run = rc_run_at(inner, depth + 1);
    if (!rc_named(inner)) PMPI_Type_free(&inner);
    return run;
}

/* Whether elements of `type` are one run of bytes in typemap order (copied, not packed). */
RC_HIDDEN int rc_type_run(MPI_Datatype type) { return rc_run_at(type, 0); }

/* `count` elements of `type` at `buf` into `bytes` bytes at `to`: copied when they are a run
 * (`run`) at a real address, else packed. MPI_SUCCESS, or an error when the packed bytes are
 * not `bytes` (an erroneous call: its sides disagree). */
RC_HIDDEN int rc_pack(const void *buf, int count, MPI_Datatype type, int run, void *to, size_t bytes, MPI_Comm comm) {
    if (bytes == 0) return MPI_SUCCESS;
    if (run && buf != MPI_BOTTOM) {
        memcpy(to, buf, bytes);
        return MPI_SUCCESS;
    }
    int pos = 0;
    if (PMPI_Pack(buf, count, type, to, (int)bytes, &pos, comm) != MPI_SUCCESS || (size_t)pos != bytes) return MPI_ERR_TRUNCATE;
    return MPI_SUCCESS;
}

/* The result's `out->bytes` at `from` into the user's memory as `out` says. */
RC_HIDDEN int rc_unpack(const struct rc_out *out, const void *from) {
    if (out->run && out->buf != MPI_BOTTOM) {
        memcpy(out->buf, from, out->bytes);
        return MPI_SUCCESS;
    }
    int pos = 0;
    if (PMPI_Unpack(from, (int)out->bytes, &pos, out->buf, out->count, out->type, out->comm) != MPI_SUCCESS ||
        (size_t)pos != out->bytes)
        return MPI_ERR_TRUNCATE;
    return MPI_SUCCESS;
}

/* ---- reductions --------------------------------------------------------------------------- */

/* Operation classes of MPI's reduction groups. */
#define ARITH 1u /* MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX */
#define BITS 2u  /* MPI_BAND, MPI_BOR, MPI_BXOR */
#define LOGIC 4u /* MPI_LAND, MPI_LOR, MPI_LXOR */
#define LOC 8u   /* MPI_MAXLOC, MPI_MINLOC */
#define SUMS 16u /* MPI_SUM alone (complex: elementwise on the parts) */

/* The engine type of a predefined MPI type and the operation classes it is reduced with here,
 * or 0: the library's path. Integers by their width and signedness, whatever the C name; the
 * pair types packed (the engine's pairs are PMPI_Pack's layout). */
static uint8_t rc_red_type(MPI_Datatype t, unsigned *classes) {
    *classes = ARITH | BITS | LOGIC;
    if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR) return RINGCAST_TYPE_INT8;
    if (t == MPI_UINT8_T || t == MPI_UNSIGNED_CHAR) return RINGCAST_TYPE_UINT8;
    if (t == MPI_INT16_T || t == MPI_SHORT) return RINGCAST_TYPE_INT16;
    if (t == MPI_UINT16_T || t == MPI_UNSIGNED_SHORT) return RINGCAST_TYPE_UINT16;
    if (t == MPI_INT32_T || t == MPI_INT) return RINGCAST_TYPE_INT32;
    if (t == MPI_UINT32_T || t == MPI_UNSIGNED) return RINGCAST_TYPE_UINT32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG || t == MPI_LONG_LONG_INT || (t == MPI_LONG && sizeof(long) == 8) ||
        (t == MPI_AINT && sizeof(MPI_Aint) == 8) || (t == MPI_OFFSET && sizeof(MPI_Offset) == 8) ||
        (t == MPI_COUNT && sizeof(MPI_Count) == 8))
        return RINGCAST_TYPE_INT64;
    if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG || (t == MPI_UNSIGNED_LONG && sizeof(long) == 8))
        return RINGCAST_TYPE_UINT64;
    if (t == MPI_BYTE) {
        *classes = BITS; /* MPI's byte group: bitwise operations only */
        return RINGCAST_TYPE_UINT8;
    }
    if (t == MPI_C_BOOL && sizeof(_Bool) == 1) {
        *classes = LOGIC; /* the logical group */
        return RINGCAST_TYPE_UINT8;
    }
    *classes = ARITH;
    if (t == MPI_FLOAT) return RINGCAST_TYPE_FLOAT;
    if (t == MPI_DOUBLE) return RINGCAST_TYPE_DOUBLE;
    *classes = SUMS;
    if (t == MPI_C_FLOAT_COMPLEX) return RINGCAST_TYPE_FLOAT;
    if (t == MPI_C_DOUBLE_COMPLEX) return RINGCAST_TYPE_DOUBLE;
    *classes = LOC;
    if (t == MPI_FLOAT_INT) return RINGCAST_TYPE_PAIR_F32_I32;
    if (t == MPI_DOUBLE_INT) return RINGCAST_TYPE_PAIR_F64_I32;
    if (t == MPI_LONG_INT && sizeof(long) == 8) return RINGCAST_TYPE_PAIR_I64_I32;
    if (t == MPI_2INT) return RINGCAST_TYPE_PAIR_I32_I32;
    if (t == MPI_SHORT_INT) return RINGCAST_TYPE_PAIR_I16_I32;
    /* x86-64's long double: the x87 80-bit format in 16 bytes. */
    if (t == MPI_LONG_DOUBLE_INT && LDBL_MANT_DIG == 64 && sizeof(long double) == 16) return RINGCAST_TYPE_PAIR_X87_I32;
    return 0;
}

/* The engine's type and operation for `type` reduced with `op` (1), or 0: not offloaded (user
 * operations, MPI_REPLACE/MPI_NO_OP, derived types, types the engine has not, an operation
 * outside the type's group — which the library reports). */
RC_HIDDEN int rc_reduction(MPI_Datatype type, MPI_Op op, uint8_t *t, uint8_t *o) {
    unsigned classes;
    *t = rc_red_type(type, &classes);
    unsigned need = 0;
    if (op == MPI_SUM) *o = RINGCAST_OP_SUM, need = ARITH | SUMS;
    else if (op == MPI_PROD) *o = RINGCAST_OP_PROD, need = ARITH;
    else if (op == MPI_MIN) *o = RINGCAST_OP_MIN, need = ARITH;
    else if (op == MPI_MAX) *o = RINGCAST_OP_MAX, need = ARITH;
    else if (op == MPI_BAND) *o = RINGCAST_OP_BAND, need = BITS;
    else if (op == MPI_BOR) *o = RINGCAST_OP_BOR, need = BITS;
    else if (op == MPI_BXOR) *o = RINGCAST_OP_BXOR, need = BITS;
    else if (op == MPI_LAND) *o = RINGCAST_OP_LAND, need = LOGIC;
    else if (op == MPI_LOR) *o = RINGCAST_OP_LOR, need = LOGIC;
    else if (op == MPI_LXOR) *o = RINGCAST_OP_LXOR, need = LOGIC;
    else if (op == MPI_MAXLOC) *o = RINGCAST_OP_MAXLOC, need = LOC;
    else if (op == MPI_MINLOC) *o = RINGCAST_OP_MINLOC, need = LOC;
    return *t != 0 && (classes & need) != 0;
}

/* ---- the paths calls took ----------------------------------------------------------------- */

static long long rc_paths[3];

RC_HIDDEN void rc_count_path(int path) { RC_ADD(rc_paths[path], 1); }

/* Exported for tests (the conformance matrix reads it through a weak reference, so a program
 * without the interposer runs too): calls offloaded with their data moved as it lies, offloaded
 * with a side packed, and sent to the library, since MPI_Init. */
__attribute__((visibility("default"))) void ringcast_mpi_paths(long long out[3]) {
    for (int i = 0; i < 3; i++) out[i] = RC_LOAD(rc_paths[i]);
}

/* wire.c — the protobuf wire format, as the ONNX reader and `mpcc export`
 * walk it: one field at a time, without decoding, so large payloads
 * (weights) can be cut out or copied as they are.
 */
#include "mpcc.h"

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return false;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

bool wire_next(const uint8_t **p, const uint8_t *end, WireField *f)
{
    uint64_t key, len;
    const uint8_t *start = *p;
    if (!read_varint(p, end, &key) || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return false;
    f->num = (uint32_t)(key >> 3);
    f->wire = key & 7;
    f->varint = 0;
    f->payload = (Span){NULL, 0};
    switch (f->wire) {
    case 0:
        if (!read_varint(p, end, &f->varint))
            return false;
        break;
    case 1:
        if (end - *p < 8)
            return false;
        *p += 8;
        break;
    case 2:
        if (!read_varint(p, end, &len) || len > (uint64_t)(end - *p))
            return false;
        f->payload = (Span){*p, (size_t)len};
        *p += len;
        break;
    case 5:
        if (end - *p < 4)
            return false;
        *p += 4;
        break;
    default:
        return false;   /* groups are not used by ONNX */
    }
    f->whole = (Span){start, (size_t)(*p - start)};
    return true;
}

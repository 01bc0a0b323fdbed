/* PUT_BLOCK from the writer's side (transport/put_client.h). */
#include "transport/put_client.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "transport/client_conn.h"
#include "wire/wire.h"

void shoal_put_payload_crcs(const struct shoal_block_id *id, uint8_t *payload, uint32_t len)
{
        uint32_t n = shoal_chunk_count(len);
        const uint8_t *data = payload + 4 * (size_t)n;
        for (uint32_t i = 0; i < n; i++) {
                uint32_t off = i * SHOAL_CHUNK_SIZE;
                uint32_t crc =
                        shoal_chunk_crc(id, i, data + off, SHOAL_MIN(SHOAL_CHUNK_SIZE, len - off));
                for (int k = 0; k < 4; k++)
                        payload[4 * (size_t)i + (size_t)k] = (uint8_t)(crc >> (8 * k));
        }
}

int shoal_rpc_put_block(int fd, uint64_t id, const struct shoal_volume *vol,
                        const struct shoal_object *obj, uint32_t index, const uint8_t *payload,
                        uint64_t view_version, uint64_t deadline, uint32_t *status)
{
        struct shoal_wire_put m = {.view_version = view_version,
                                   .obj_size = obj->size,
                                   .block_size = vol->block_size,
                                   .block_index = index,
                                   .key_len = (uint16_t)strlen(obj->key),
                                   .version_len = (uint16_t)strlen(obj->version),
                                   .key = obj->key,
                                   .version = obj->version};
        uint8_t frame[SHOAL_WIRE_HDR_LEN + 1280];
        int n = shoal_wire_put_encode(frame + SHOAL_WIRE_HDR_LEN,
                                      sizeof(frame) - SHOAL_WIRE_HDR_LEN, &m);
        if (n < 0)
                return -EINVAL;
        uint32_t plen = shoal_wire_put_payload_len(&m);
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = SHOAL_MSG_PUT_BLOCK,
                                   .body_len = (uint32_t)n,
                                   .payload_len = plen,
                                   .id = id};
        shoal_wire_hdr_encode(frame, &h, frame + SHOAL_WIRE_HDR_LEN);
        int rc = shoal_rpc_send_all(fd, frame, SHOAL_WIRE_HDR_LEN + (size_t)n, deadline);
        if (!rc)
                rc = shoal_rpc_send_all(fd, payload, plen, deadline);
        if (rc)
                return rc;
        uint8_t hdr[SHOAL_WIRE_HDR_LEN], body[256];
        struct shoal_wire_hdr a;
        rc = shoal_rpc_recv_frame(fd, &a, hdr, body, sizeof(body), deadline);
        if (rc)
                return rc;
        if (a.id != id)
                return -EPROTO;
        if (a.type == SHOAL_MSG_PUT_RESP)
                return 0;
        if (a.type != SHOAL_MSG_ERROR)
                return -EPROTO;
        *status = a.status;
        return -EREMOTEIO;
}

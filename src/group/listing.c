/* Reading a group without joining it: `shoal group` (its listing, members and clients, with
 * liveness judged from one listing where the registry keeps leases, else from two listings a
 * wait apart) and `shoal group --set-weight`. */
#include "group/group_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/util.h"

static int64_t wall_ms(void)
{
        return (int64_t)(shoal_wall_ns() / SHOAL_NS_PER_MS);
}

static int cmp_member(const void *a, const void *b)
{
        return strcmp(((const struct shoal_member *)a)->id, ((const struct shoal_member *)b)->id);
}

/* Lists R twice, WAIT_NS apart (once when 0), into *OUT, *N (sorted by id) and judges
 * liveness by the counters that moved and by wall age. */
static int list_watched(struct shoal_registry *r, uint64_t wait_ns, uint64_t timeout_ns,
                        struct shoal_member **out, size_t *n)
{
        struct shoal_member *first = NULL, *second = NULL;
        size_t n1 = 0, n2 = 0;
        int ret = shoal_registry_list(r, &first, &n1);
        if (ret < 0)
                return ret;
        if (wait_ns > 0) {
                shoal_sleep_ns(wait_ns);
                ret = shoal_registry_list(r, &second, &n2);
                if (ret < 0) {
                        free(first);
                        return ret;
                }
        } else {
                second = first;
                n2 = n1;
                first = NULL;
                n1 = 0;
        }
        if (n1)
                qsort(first, n1, sizeof(*first), cmp_member);
        int64_t wnow = wall_ms();
        for (size_t i = 0; i < n2; i++) {
                struct shoal_member *m = &second[i];
                struct shoal_member *old =
                        n1 ? bsearch(m, first, n1, sizeof(*first), cmp_member) : NULL;
                bool moved = old && old->beat != m->beat;
                uint64_t wall_age = m->updated_ms < wnow ? (uint64_t)(wnow - m->updated_ms) : 0;
                /* Watched for WAIT without a move, the member has been silent at least that
                 * long, whatever its clock says. */
                uint64_t silent_ms = moved ? 0 : SHOAL_MAX(wall_age, wait_ns / SHOAL_NS_PER_MS);
                m->alive = (moved || silent_ms < timeout_ns / SHOAL_NS_PER_MS) && !m->leaving;
                m->age_ms = moved ? SHOAL_MIN(wall_age, wait_ns / SHOAL_NS_PER_MS) : silent_ms;
                m->grace_left_ms =
                        !m->alive && silent_ms < m->grace_ms ? m->grace_ms - silent_ms : 0;
        }
        free(first);
        *out = second;
        *n = n2;
        return 0;
}

/* Appends R's clients to *V, *N (alive by their lease, or else by wall age). */
static int append_clients(struct shoal_registry *r, uint64_t timeout_ns, struct shoal_member **v,
                          size_t *n)
{
        struct shoal_member *c = NULL;
        size_t nc = 0;
        int ret = shoal_registry_list_clients(r, &c, &nc);
        if (ret < 0 || !nc) {
                free(c);
                return ret;
        }
        struct shoal_member *all = realloc(*v, (*n + nc) * sizeof(*all));
        if (!all) {
                free(c);
                return -ENOMEM;
        }
        int64_t wnow = wall_ms();
        for (size_t i = 0; i < nc; i++) {
                uint64_t age = c[i].updated_ms < wnow ? (uint64_t)(wnow - c[i].updated_ms) : 0;
                if (!shoal_registry_has_leases(r)) {
                        c[i].alive = age < timeout_ns / SHOAL_NS_PER_MS;
                        c[i].age_ms = age;
                }
                all[*n + i] = c[i];
        }
        free(c);
        *v = all;
        *n += nc;
        return 0;
}

int shoal_group_list_once(const char *meta_url, const char *group, uint64_t wait_ns,
                          struct shoal_member **out, size_t *n, char *err, size_t errlen)
{
        uint64_t timeout_ns = shoal_config_pick(0, shoal_config_env()->group_timeout_ns,
                                                SHOAL_GROUP_TIMEOUT_DEFAULT);
        struct shoal_member *v = NULL;
        size_t nv = 0;
        struct shoal_registry *r;

        int ret = shoal_registry_open(meta_url, group, &r, err, errlen);
        if (ret)
                return ret;
        /* With leases the registry knows who is alive: one listing. */
        if (shoal_registry_has_leases(r))
                ret = shoal_registry_list(r, &v, &nv);
        else
                ret = list_watched(r, wait_ns, timeout_ns, &v, &nv);
        if (ret >= 0)
                ret = append_clients(r, timeout_ns, &v, &nv);
        shoal_registry_close(r);
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot list the members: %s", group,
                         strerror(-ret));
                free(v);
                return ret;
        }
        if (nv)
                qsort(v, nv, sizeof(*v), cmp_member);
        *out = v;
        *n = nv;
        return 0;
}

/* MEMBER as `shoal group` prints it: the id, or an address of one of its transports. */
static bool member_is(const struct shoal_member *m, const char *member)
{
        return !strcmp(m->id, member) || (m->tcp_addr[0] && !strcmp(m->tcp_addr, member)) ||
               (m->iorpc_addr[0] && !strcmp(m->iorpc_addr, member));
}

int shoal_group_set_weight(const char *meta_url, const char *group, const char *member,
                           uint32_t weight, struct shoal_member *out, char *err, size_t errlen)
{
        struct shoal_registry *r;
        struct shoal_member *list = NULL;
        size_t n = 0;
        char shown[SHOAL_ADDR_LEN + 8];

        if (weight > SHOAL_WEIGHT_MAX) {
                snprintf(err, errlen, "weight %" PRIu32 " is over %d", weight, SHOAL_WEIGHT_MAX);
                return -EINVAL;
        }
        int ret = shoal_registry_open(meta_url, group, &r, err, errlen);
        if (ret)
                return ret;
        ret = shoal_registry_list(r, &list, &n);
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot list the members: %s", group,
                         strerror(-ret));
                goto out;
        }
        const struct shoal_member *m = NULL;
        for (size_t i = 0; i < n; i++) {
                if (!member_is(&list[i], member))
                        continue;
                /* An address may have been reused by a later member: the one that beat last. */
                if (!m || list[i].updated_ms > m->updated_ms)
                        m = &list[i];
        }
        shoal_group_printable(member, strlen(member), shown, sizeof(shown));
        if (!m) {
                snprintf(err, errlen,
                         "group \"%s\" has no member %s (give an id or an address as "
                         "'shoal group' prints it)",
                         group, shown);
                ret = -ENOENT;
                goto out;
        }
        if (m->role != SHOAL_ROLE_PROVIDER) {
                snprintf(err, errlen, "member %s of group \"%s\" is a consumer: it owns nothing",
                         m->id, group);
                ret = -EINVAL;
                goto out;
        }
        ret = shoal_registry_set_weight(r, m->id, weight);
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot set the weight of %s: %s", group, m->id,
                         strerror(-ret));
                goto out;
        }
        if (out)
                *out = *m;
out:
        free(list);
        shoal_registry_close(r);
        return ret;
}

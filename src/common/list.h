/* An intrusive doubly linked list with a sentinel head (the Linux kernel's shape): a node lives
 * inside the element it links, so linking and unlinking never allocate and cannot fail. An empty
 * list's head points at itself; an unlinked node points at itself too, so unlinking twice and
 * asking "am I linked?" are safe.
 *
 * An LRU is a list of this kind used one way: shoal_list_move_front on use, shoal_list_last for the
 * coldest entry; common/lru.h wraps that with a count (the cache index, the size cache and the
 * reader's held blocks use it). */
#ifndef SHOAL_COMMON_LIST_H
#define SHOAL_COMMON_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct shoal_list {
        struct shoal_list *next, *prev;
};

#define SHOAL_LIST_INIT(name)    \
        {                        \
                &(name), &(name) \
        }

/* The element of type TYPE whose member MEMBER is the node PTR. */
#define shoal_list_entry(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Walks the list HEAD with POS at each node; TMP is read before the body runs, so the body may
 * unlink (and free the element of) POS. (TMP is any name: the macro names its own fields.) */
#define list_for_each(pos, tmp, head)                                    \
        for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
             (pos) = (tmp), (tmp) = (pos)->next)

static inline void shoal_list_init(struct shoal_list *l)
{
        l->next = l;
        l->prev = l;
}

static inline bool shoal_list_empty(const struct shoal_list *head)
{
        return head->next == head;
}

/* Whether node N is in some list (a node set up by shoal_list_init or unlinked is not). */
static inline bool shoal_list_linked(const struct shoal_list *n)
{
        return n->next != n;
}

static inline void list_insert_between(struct shoal_list *n, struct shoal_list *prev,
                                       struct shoal_list *next)
{
        n->prev = prev;
        n->next = next;
        prev->next = n;
        next->prev = n;
}

/* N first in HEAD. */
static inline void shoal_list_push_front(struct shoal_list *head, struct shoal_list *n)
{
        list_insert_between(n, head, head->next);
}

/* N last in HEAD. */
static inline void shoal_list_push_back(struct shoal_list *head, struct shoal_list *n)
{
        list_insert_between(n, head->prev, head);
}

/* Takes N out of its list (a no-op for a node that is not linked). */
static inline void shoal_list_del(struct shoal_list *n)
{
        n->prev->next = n->next;
        n->next->prev = n->prev;
        shoal_list_init(n);
}

/* Moves N (linked or not) to the front of HEAD: the LRU's "just used". */
static inline void shoal_list_move_front(struct shoal_list *head, struct shoal_list *n)
{
        shoal_list_del(n);
        shoal_list_push_front(head, n);
}

/* The first and the last node of HEAD, or NULL when it is empty. */
static inline struct shoal_list *shoal_list_first(const struct shoal_list *head)
{
        return shoal_list_empty(head) ? NULL : head->next;
}

static inline struct shoal_list *shoal_list_last(const struct shoal_list *head)
{
        return shoal_list_empty(head) ? NULL : head->prev;
}

#endif

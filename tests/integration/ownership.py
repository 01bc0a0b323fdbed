#!/usr/bin/env python3
"""Block ownership bookkeeping for the rolling kill -9 test, from the members' own logs.

Each member logs "store: get KEY [OFF+LEN]" when it fetches a block from the store. Feeding those
lines window by window (as "MEMBER KEY OFF" lines), this keeps who owns each block and who holds a
copy, and checks what placement and single flight promise:

  ownership.py init STATE NBLOCKS GETS     every block fetched exactly once, by its owner
  ownership.py leave STATE VICTIM GETS     after VICTIM died: only its blocks were fetched again,
                                           each once, by a survivor that held no copy; every
                                           block of it not fetched again is held by a survivor
  ownership.py join STATE NEWCOMER GETS    a member joined: only it fetched (the blocks it now
                                           owns), each once, from the store or (lines
                                           "MEMBER copy KEY OFF") from the block's previous owner

STATE is a JSON file. Each command prints one summary line, or one line per problem and exits 1.
"""
import collections
import json
import sys


def load_gets(path):
    gets = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                gets.append((parts[0], parts[1] + "@" + parts[2]))
    return gets


def dups(gets):
    c = collections.Counter(b for _, b in gets)
    return sorted(b for b, n in c.items() if n > 1)


def main():
    cmd, state_path = sys.argv[1], sys.argv[2]
    problems = []
    if cmd == "init":
        nblocks, gets = int(sys.argv[3]), load_gets(sys.argv[4])
        d = dups(gets)
        if d:
            problems.append("%d blocks fetched more than once at warm-up, e.g. %s" % (len(d), d[:3]))
        owner = {b: m for m, b in gets}
        if len(owner) != nblocks:
            problems.append("%d blocks fetched at warm-up, the objects have %d" % (len(owner), nblocks))
        holders = {b: [m] for b, m in owner.items()}
        per = collections.Counter(owner.values())
        summary = "warm-up: %d blocks, each fetched once by its owner (%s)" % (
            len(owner), ", ".join("%s %d" % kv for kv in sorted(per.items())))
    else:
        with open(state_path) as f:
            st = json.load(f)
        owner, holders = st["owner"], st["holders"]
        who, gets = sys.argv[3], load_gets(sys.argv[4])
        d = dups(gets)
        if d:
            problems.append("%d blocks fetched more than once, e.g. %s" % (len(d), d[:3]))
        if cmd == "leave":
            mine = {b for b, m in owner.items() if m == who}
            for h in holders.values():
                if who in h:
                    h.remove(who)
            fetched = set()
            for m, b in gets:
                if m == who:
                    problems.append("the dead member %s fetched %s" % (who, b))
                elif b not in mine:
                    problems.append("%s fetched %s, which %s owned, not the dead member" % (
                        m, b, owner.get(b, "nobody")))
                elif m in holders[b]:
                    problems.append("%s fetched %s although it held a copy" % (m, b))
                else:
                    fetched.add(b)
                    owner[b] = m
                    holders[b].append(m)
            kept = 0
            for b in mine - fetched:
                if not holders[b]:
                    problems.append("block %s of the dead member was served without a fetch, "
                                    "but no survivor held it" % b)
                else:
                    # Holders are listed in the order they fetched; each fetched because it beat
                    # every live member then, so the last live one is the owner now.
                    kept += 1
                    owner[b] = holders[b][-1]
            summary = ("%s owned %d blocks: %d fetched again by new owners (one GET each), %d "
                       "served by survivors that still held them" % (who, len(mine), len(fetched), kept))
        elif cmd == "join":
            taken = set()
            for m, b in gets:
                if m != who:
                    problems.append("%s fetched %s while only %s joined" % (m, b, who))
                elif b not in owner:
                    problems.append("%s fetched %s, not a block of these objects" % (m, b))
                else:
                    taken.add(b)
                    owner[b] = who
                    holders[b].append(who)
            if not taken:
                problems.append("%s joined but took no block" % who)
            summary = "%s joined and took %d of %d blocks (one GET or copy each)" % (who, len(taken), len(owner))
        else:
            sys.exit("unknown command " + cmd)
    if problems:
        for p in problems[:20]:
            print("ownership: " + p)
        sys.exit(1)
    with open(state_path, "w") as f:
        json.dump({"owner": owner, "holders": holders}, f)
    print(summary)


if __name__ == "__main__":
    main()

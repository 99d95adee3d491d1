#include "interval_index.h"

#include <algorithm>
#include <new>

namespace nicemu::udreg {

// A leaf holds entries (key = start, max_end = end, child = Entry*); an internal node holds
// children (key = smallest start below, max_end = largest end below, child = Node*). Keys are
// in non-decreasing order; equal starts may sit on both sides of a split. Unused key slots
// hold UINT64_MAX, so a search compares all kFanout keys without branching on them: the
// cost of a lookup is mispredicted branches more than cache misses.
struct alignas(64) IntervalIndex::Node {
  uint64_t key[kFanout];
  // What a search reads after the keys, for one slot: in one cache line.
  struct Slot {
    uint64_t max_end;
    void* child;
  } slot[kFanout];
  Node* parent = nullptr;
  int count = 0;
  bool leaf = true;

  Node() {
    for (auto& k : key) k = UINT64_MAX;
  }

  Node* node(int i) const { return static_cast<Node*>(slot[i].child); }
  Entry* entry(int i) const { return static_cast<Entry*>(slot[i].child); }

  uint64_t summary_end() const {
    uint64_t m = 0;
    for (int i = 0; i < count; ++i) m = std::max(m, slot[i].max_end);
    return m;
  }

  // Last slot whose key is <= a, or -1 (a == UINT64_MAX never occurs: ranges end above it).
  int last_at_or_before(uint64_t a) const {
    int n = 0;
    for (int i = 0; i < kFanout; ++i) n += key[i] <= a;
    return n - 1;
  }

  int index_of(const void* c) const {
    for (int i = 0; i < count; ++i)
      if (slot[i].child == c) return i;
    return -1;
  }

  void insert_at(int i, uint64_t k, uint64_t e, void* c) {
    for (int j = count; j > i; --j) {
      key[j] = key[j - 1];
      slot[j] = slot[j - 1];
    }
    key[i] = k;
    slot[i].max_end = e;
    slot[i].child = c;
    ++count;
  }

  void remove_at(int i) {
    for (int j = i; j + 1 < count; ++j) {
      key[j] = key[j + 1];
      slot[j] = slot[j + 1];
    }
    --count;
    key[count] = UINT64_MAX;
  }

  void adopt(int i) {
    if (leaf)
      static_cast<Entry*>(slot[i].child)->leaf = this;
    else
      static_cast<Node*>(slot[i].child)->parent = this;
  }
};

namespace {

using Node = IntervalIndex::Node;
constexpr int kFanout = IntervalIndex::kFanout;

void free_subtree(Node* n) {
  if (!n) return;
  if (!n->leaf)
    for (int i = 0; i < n->count; ++i) free_subtree(n->node(i));
  delete n;
}

// Any entry below n with end >= b; the caller knows one exists.
Entry* any_reaching(const Node* n, uint64_t b) {
  for (;;) {
    int i = 0;
    while (i < n->count && n->slot[i].max_end < b) ++i;
    if (i == n->count) return nullptr;
    if (n->leaf) return n->entry(i);
    n = n->node(i);
  }
}

Entry* covering(const Node* n, uint64_t a, uint64_t b) {
  int i = n->last_at_or_before(a);
  if (n->leaf) {
    for (; i >= 0; --i)
      if (n->slot[i].max_end >= b) return n->entry(i);
    return nullptr;
  }
  if (i < 0) return nullptr;
  // Child i may also hold starts after a: explore it. Children before it start at or
  // before a throughout, so one that reaches b holds a covering entry for sure.
  if (n->slot[i].max_end >= b)
    if (Entry* e = covering(n->node(i), a, b)) return e;
  for (--i; i >= 0; --i)
    if (n->slot[i].max_end >= b) return any_reaching(n->node(i), b);
  return nullptr;
}

void collect(const Node* n, uint64_t a, uint64_t b, Entry** head) {
  for (int i = 0; i < n->count && n->key[i] < b; ++i) {
    if (n->slot[i].max_end <= a) continue;
    if (n->leaf) {
      Entry* e = n->entry(i);
      e->next_hit = *head;
      *head = e;
    } else {
      collect(n->node(i), a, b, head);
    }
  }
}

bool verify_node(const Node* n, const Node* parent, int depth, int leaf_depth, size_t* entries, uint64_t* min_key,
                 uint64_t* max_end) {
  if (n->parent != parent || n->count < 1 || n->count > kFanout) return false;
  for (int i = 0; i + 1 < n->count; ++i)
    if (n->key[i] > n->key[i + 1]) return false;
  for (int i = n->count; i < kFanout; ++i)
    if (n->key[i] != UINT64_MAX) return false;
  for (int i = 0; i < n->count; ++i) {
    if (n->leaf) {
      const Entry* e = n->entry(i);
      if (depth != leaf_depth || e->leaf != n || e->start != n->key[i] || e->end != n->slot[i].max_end ||
          e->start >= e->end)
        return false;
      ++*entries;
    } else {
      uint64_t k = 0, m = 0;
      if (!verify_node(n->node(i), n, depth + 1, leaf_depth, entries, &k, &m)) return false;
      if (k != n->key[i] || m != n->slot[i].max_end) return false;
      // Order across children: the next child starts no earlier than this one's last key.
      if (i + 1 < n->count) {
        const Node* c = n->node(i);
        while (!c->leaf) c = c->node(c->count - 1);
        if (c->key[c->count - 1] > n->key[i + 1]) return false;
      }
    }
  }
  *min_key = n->key[0];
  *max_end = n->summary_end();
  return true;
}

}  // namespace

IntervalIndex::~IntervalIndex() { free_subtree(root_); }

// Brings the summaries of n's ancestors up to date after n changed.
void IntervalIndex::refresh_up(Node* n) {
  while (Node* p = n->parent) {
    int i = p->index_of(n);
    p->key[i] = n->key[0];
    p->slot[i].max_end = n->summary_end();
    n = p;
  }
}

// Splits the full node n, whose parent (if any) has room; a full root gets a new root.
bool IntervalIndex::split(Node* n) {
  Node* s = new (std::nothrow) Node;
  if (!s) return false;
  Node* p = n->parent;
  if (!p) {
    p = new (std::nothrow) Node;
    if (!p) {
      delete s;
      return false;
    }
    p->leaf = false;
    p->insert_at(0, n->key[0], n->summary_end(), n);
    n->parent = p;
    root_ = p;
  }
  s->leaf = n->leaf;
  int keep = n->count / 2;
  for (int i = keep; i < n->count; ++i) {
    s->key[i - keep] = n->key[i];
    s->slot[i - keep] = n->slot[i];
    s->adopt(i - keep);
  }
  s->count = n->count - keep;
  for (int i = keep; i < n->count; ++i) n->key[i] = UINT64_MAX;
  n->count = keep;
  s->parent = p;
  int at = p->index_of(n);
  p->slot[at].max_end = n->summary_end();
  p->insert_at(at + 1, s->key[0], s->summary_end(), s);
  return true;
}

bool IntervalIndex::insert(Entry* e) {
  if (!root_) {
    root_ = new (std::nothrow) Node;
    if (!root_) return false;
  }
  if (root_->count == kFanout && !split(root_)) return false;
  // Top down, splitting full nodes before entering them, so the parent of a split always
  // has room and a failed allocation leaves a valid tree.
  Node* n = root_;
  while (!n->leaf) {
    int i = std::max(n->last_at_or_before(e->start), 0);
    if (n->node(i)->count == kFanout) {
      if (!split(n->node(i))) return false;
      i = std::max(n->last_at_or_before(e->start), 0);
    }
    n = n->node(i);
  }
  n->insert_at(n->last_at_or_before(e->start) + 1, e->start, e->end, e);
  e->leaf = n;
  ++size_;
  refresh_up(n);
  return true;
}

void IntervalIndex::remove_child(Node* parent, Node* child) {
  parent->remove_at(parent->index_of(child));
  delete child;
}

void IntervalIndex::erase(Entry* e) {
  auto* n = static_cast<Node*>(e->leaf);
  if (!n) return;
  int i = n->index_of(e);
  if (i < 0) return;
  n->remove_at(i);
  e->leaf = nullptr;
  --size_;
  // Remove emptied nodes upwards, then shorten a root with a single child.
  while (n->count == 0) {
    Node* p = n->parent;
    if (!p) {
      delete n;
      root_ = nullptr;
      return;
    }
    remove_child(p, n);
    n = p;
  }
  refresh_up(n);
  while (!root_->leaf && root_->count == 1) {
    Node* only = root_->node(0);
    only->parent = nullptr;
    delete root_;
    root_ = only;
  }
}

Entry* IntervalIndex::find_covering(uint64_t a, uint64_t b) const {
  return root_ ? covering(root_, a, b) : nullptr;
}

Entry* IntervalIndex::collect_overlapping(uint64_t a, uint64_t b) const {
  Entry* head = nullptr;
  if (root_) collect(root_, a, b, &head);
  return head;
}

int IntervalIndex::depth() const {
  int d = 0;
  for (const Node* n = root_; n; n = n->leaf ? nullptr : n->node(0)) ++d;
  return d;
}

bool IntervalIndex::verify() const {
  if (!root_) return size_ == 0;
  size_t entries = 0;
  uint64_t k = 0, m = 0;
  return verify_node(root_, nullptr, 1, depth(), &entries, &k, &m) && entries == size_;
}

}  // namespace nicemu::udreg

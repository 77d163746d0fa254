"The simplest replay memory that could work: a list of rows and a write position, one row at a time."

class ListMemory:
    "Rows in storage order, written one at a time at `pointer`, which wraps to 0 only when the next row arrives"
    def __init__(self, max_sz):
        self.max_sz, self.rows, self.pointer = max_sz, [], 0
        self.time, self.written, self.sampled = 0, {}, {}  # a clock; when each row was written and last handed out

    def add(self, rows):
        self.time += 1
        for r in rows:
            if self.pointer == self.max_sz: self.pointer = 0
            if self.pointer < len(self.rows): self.rows[self.pointer] = dict(r)
            else: self.rows.append(dict(r))
            self.written[self.pointer] = self.time
            self.pointer += 1

    def sampled_rows(self, idxs):
        self.time += 1
        for i in idxs: self.sampled[i] = self.time

    def update_td(self, tds, idxs):
        "Write `tds` at rows `idxs`, except rows overwritten since they were last handed out"
        for td, i in zip(tds, idxs):
            if self.sampled.get(i, self.time + 1) < self.written[i]: continue
            self.rows[i]['td_error'] = td

    def __len__(self): return len(self.rows)

"The simplest replay memory that could work: a list of rows and a write position, one row at a time."

class ListMemory:
    "Rows in storage order, written one at a time at `pointer`, which wraps to 0 only when the next row arrives"
    def __init__(self, max_sz):
        self.max_sz, self.rows, self.pointer = max_sz, [], 0

    def add(self, rows):
        for r in rows:
            if self.pointer == self.max_sz: self.pointer = 0
            if self.pointer < len(self.rows): self.rows[self.pointer] = dict(r)
            else: self.rows.append(dict(r))
            self.pointer += 1

    def update_td(self, tds, idxs):
        for td, i in zip(tds, idxs): self.rows[i]['td_error'] = td

    def __len__(self): return len(self.rows)

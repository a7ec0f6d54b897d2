"""Everything a client needs from include/gpupm/gpupm_uapi.h, read from the
header itself: every integer #define, the per-instance offset macros, the
static tables (event names, units, scopes, multi-bit flags), and the layout
of every struct, computed from its C declaration with natural alignment and
checked against the header's own GPUPM_STATIC_ASSERT(sizeof ...) lines.

Nothing here comes from the gpupm sources: an outside author with the
header and docs/abi.md would write the same.
"""

import re
import struct

_INT = re.compile(r"^(0x[0-9a-fA-F]+|\d+)(U|ULL|LL|L|UL)?$")
_SCALARS = {"uint8_t": "B", "uint16_t": "H", "uint32_t": "I", "uint64_t": "Q"}


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


class Field:
    """One member: offset, element format (or nested Struct), count (None = scalar)."""

    def __init__(self, name, offset, elem, count):
        self.name, self.offset, self.elem, self.count = name, offset, elem, count

    def elem_size(self):
        return self.elem.size if isinstance(self.elem, Struct) else struct.calcsize("<" + self.elem)


class Struct:
    """A C struct's layout: `get`/`set` take paths like "ops[3].value"."""

    def __init__(self, name):
        self.name, self.fields, self.size, self.align = name, {}, 0, 1

    def new(self):
        return bytearray(self.size)

    def _locate(self, path):
        layout, offset, field = self, 0, None
        for part in path.split("."):
            m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part)
            if m is None or layout is None or m.group(1) not in layout.fields:
                raise KeyError(f"{self.name}: no {path}")
            field = layout.fields[m.group(1)]
            offset += field.offset
            if m.group(2) is not None:
                index = int(m.group(2))
                if field.count is None or index >= field.count:
                    raise KeyError(f"{self.name}: {path} out of range")
                offset += index * field.elem_size()
                field = Field(field.name, 0, field.elem, None)
            layout = field.elem if isinstance(field.elem, Struct) else None
        return offset, field

    def offset(self, path):
        return self._locate(path)[0]

    def get(self, buf, path, base=0):
        offset, f = self._locate(path)
        if isinstance(f.elem, Struct):
            size = f.elem.size * (f.count or 1)
            return bytes(buf[base + offset: base + offset + size])
        fmt = "<" + (f"{f.count}{f.elem}" if f.count is not None else f.elem)
        values = struct.unpack_from(fmt, buf, base + offset)
        if f.count is None:
            return values[0]
        return bytes(values) if f.elem == "B" else list(values)

    def set(self, buf, path, value, base=0):
        offset, f = self._locate(path)
        if isinstance(f.elem, Struct) or (f.count is not None and f.elem == "B"):
            data = bytes(value)
            buf[base + offset: base + offset + len(data)] = data
        elif f.count is not None:
            struct.pack_into(f"<{len(value)}{f.elem}", buf, base + offset, *value)
        else:
            struct.pack_into("<" + f.elem, buf, base + offset, value)


class Header:
    """The parsed header: `H.GPUPM_REG_CYCLE`, `H.struct("gpupm_block")`, ..."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.text = f.read()
        self.code = _strip_comments(self.text)
        self.defines = {}
        for name, value in re.findall(r"^\s*#define\s+(\w+)\s+(\S+)\s*$", self.code, flags=re.M):
            m = _INT.match(value)
            if m:
                self.defines[name] = int(m.group(1), 0)
        self.structs = {}
        for name, body in re.findall(r"struct\s+(\w+)\s*\{(.*?)\};", self.code, flags=re.S):
            self.structs[name] = self._layout(name, body)
        for name, size in re.findall(
            r"GPUPM_STATIC_ASSERT\(sizeof\(struct (\w+)\) == (\d+)\);", self.code
        ):
            if self.structs[name].size != int(size):
                raise ValueError(f"struct {name}: computed {self.structs[name].size}, header says {size}")
        self.tables = {}
        for name, body in re.findall(r"static const [\w\s*]+?\b(\w+)\[\w+\]\s*=\s*\{(.*?)\};", self.code, flags=re.S):
            items = [x.strip() for x in body.split(",") if x.strip()]
            self.tables[name] = [x.strip('"') if x.startswith('"') else int(x, 0) for x in items]

    def __getattr__(self, name):
        try:
            return self.__dict__["defines"][name]
        except KeyError:
            raise AttributeError(name) from None

    def _dim(self, expr):
        return int(expr) if expr.isdigit() else self.defines[expr]

    def _layout(self, name, body):
        layout = Struct(name)
        offset = 0
        for decl in [d.strip() for d in body.split(";") if d.strip()]:
            m = re.fullmatch(r"(struct\s+\w+|\w+)\s+(\w+)(?:\[(\w+)\])?", decl)
            if m is None:
                raise ValueError(f"struct {name}: cannot parse {decl!r}")
            ctype, field, dim = m.groups()
            if ctype.startswith("struct"):
                elem = self.structs[ctype.split()[1]]
                size, align = elem.size, elem.align
            else:
                elem = _SCALARS[ctype]
                size = align = struct.calcsize("<" + elem)
            offset = (offset + align - 1) // align * align
            count = self._dim(dim) if dim else None
            layout.fields[field] = Field(field, offset, elem, count)
            offset += size * (count or 1)
            layout.align = max(layout.align, align)
        layout.size = (offset + layout.align - 1) // layout.align * layout.align
        return layout

    def struct(self, name):
        return self.structs[name]

    def instance(self, unit, i, reg):
        """GPUPM_<UNIT>(i, reg): the offset of register `reg` of instance `i`."""
        return self.defines[f"GPUPM_{unit}_BASE"] + i * self.defines[f"GPUPM_{unit}_STRIDE"] + reg

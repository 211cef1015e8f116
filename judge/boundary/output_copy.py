"""The call frame's copy of a kernel's output into the runner's outboxes (judge.boundary.callframe): the output taken
apart without calling anything of the kernel's, and its description written for the reply. A GPU tensor goes to the
device outbox, which holds the reference's output once; one that does not fit there (a wider dtype, padding) goes to
the host outbox, which holds it twice (judge.boundary.staging.OUTBOX_FACTOR).

`taker` runs when the frame is entered, before the kernel's first call, and returns the closure `take` over
primitives bound then; `take` runs right after each call, inside the frame, and reads no global. It is one function
for the reason `serve_calls` is: what follows the kernel's call uses locals only.
"""

from __future__ import annotations

MAX_LEAVES = 64  # tensors in one output; the bounds on its nesting are judge.boundary.exchange's MAX_OUTPUT_*


def output_values() -> dict:
    """The callables `take` needs beyond the frame's own, bound before the kernel is imported: exact types, tuple's
    own slots, a class's own namespace, bases and name."""
    import types

    return {"int": int, "float": float, "bool": bool, "repr": repr, "encode": str.encode, "concat": b"".join,
            "tuple_items": tuple.__getitem__, "tuple_len": tuple.__len__, "dict_items": dict.items,
            "dict_get": dict.get, "proxy_items": types.MappingProxyType.items,
            "class_dict": type.__dict__["__dict__"].__get__, "class_bases": type.__dict__["__bases__"].__get__,
            "class_name": type.__dict__["__name__"].__get__}


def output_objects(json_string) -> dict:
    """The objects `take` compares with: torch's named tuples and their fields as JSON, taken now (a class the
    kernel makes or swaps in later is not among them), the tensor metaclass and the bounds on an output."""
    import torch

    from . import exchange

    named = {cls: b"[" + b", ".join(json_string(f).encode() for f in fields) + b"]"
             for cls, fields in exchange.torch_named_outputs().items()}
    return {"tensor_meta": type(torch.Tensor), "named": named,
            "limits": (exchange.MAX_OUTPUT_DEPTH, exchange.MAX_OUTPUT_NODES, exchange.MAX_NAME_CHARS,
                       exchange.INT_BOUND, exchange.OUTPUTS)}


def taker(v: dict, o: dict):
    """The frame's copy of an output into the outbox, as a closure over locals bound now: it reads no global."""
    type_, tensor, tuple_, list_, dict_ = v["type"], o["tensor"], v["tuple"], v["list"], v["dict"]
    reversed_, length, join, max_, zip_ = v["reversed"], v["len"], v["join"], v["max"], v["zip"]
    layout, strided, is_conj, is_neg = v["layout"], o["strided"], v["is_conj"], v["is_neg"]
    dtype_of, dtypes, size_of, stride_of = v["dtype"], o["dtypes"], v["size"], v["stride"]
    element_size, is_cuda, as_strided, view, getitem = v["element_size"], v["is_cuda"], v["as_strided"], \
        v["view"], v["getitem"]
    copy_, slice_, range_, str_, repr_ = v["copy_"], v["slice"], v["range"], v["str"], v["repr"]
    int_, float_, bool_, encode, concat, json_str = v["int"], v["float"], v["bool"], v["encode"], v["concat"], \
        v["json_str"]
    tuple_items, tuple_len, dict_items, dict_get = v["tuple_items"], v["tuple_len"], v["dict_items"], v["dict_get"]
    proxy_items, class_dict, class_bases, class_name = v["proxy_items"], v["class_dict"], v["class_bases"], \
        v["class_name"]
    named, tensor_meta, whole = o["named"], o["tensor_meta"], slice_(None)
    max_depth, max_nodes, max_name, bound, outputs = o["limits"]
    max_leaves, nonfinite = MAX_LEAVES, (b"nan", b"inf", b"-inf")

    def name_of(kind) -> str:
        """A class's own __name__ (type's slot, not an attribute lookup), where it is an exact str."""
        name = class_name(kind)
        return name[:100] if type_(name) is str_ else "object"

    def fields_of(kind, node):
        """(a named tuple's fields as JSON, '') for a class collections.namedtuple could have made, else ('', what
        is wrong). Nothing of the class runs: its metaclass is exactly `type`, its bases and namespace are read
        through type's own slots, every key of the namespace must be an exact str before `_fields` is compared."""
        bases = class_bases(kind)
        if length(bases) != 1 or bases[0] is not tuple_:
            return b"", "is a " + name_of(kind) + ": " + outputs
        fields = None
        for key, value in proxy_items(class_dict(kind)):
            if type_(key) is not str_:
                return b"", "is a " + name_of(kind) + ", a tuple subclass whose namespace has keys that are not str"
            if key == "_fields":
                fields = value
        if type_(fields) is not tuple_:
            return b"", ("is a " + name_of(kind) + ", a tuple subclass that is no named tuple (neither torch's nor "
                         "one made by collections.namedtuple)")
        if length(fields) != tuple_len(node):
            return b"", "is a " + name_of(kind) + " whose _fields do not name its items one for one"
        texts = []
        for field in fields:
            if type_(field) is not str_ or not 0 < length(field) <= max_name:
                return b"", "is a " + name_of(kind) + " whose _fields are not names"
            texts.append(encode(json_str(field)))
        return b"[" + join(texts) + b"]", ""

    def take(out, outboxes):
        """(the leaves as JSON text, the output's description as JSON text (judge.boundary.exchange), a problem or
        '', bytes of output held outside the outbox)."""
        flat, parts, nodes = [], [], 0
        stack = [(0, out, "")]  # (depth, node, its path); depth -1: text to write as it is
        while stack:
            depth, node, path = stack.pop()
            if depth < 0:
                parts.append(node)
                continue
            nodes += 1
            if nodes > max_nodes:
                return b"", b"null", "the output has more than " + str_(max_nodes) + " parts", 0
            if depth > max_depth:
                return b"", b"null", "output" + path + " is nested more than " + str_(max_depth) + " deep", 0
            kind = type_(node)
            if kind is tensor:
                parts.append(b'{"tensor": %d}' % length(flat))
                flat.append(node)
                if length(flat) > max_leaves:
                    return b"", b"null", "the output has more than 64 tensors", 0
            elif node is None:
                parts.append(b'{"value": null}')
            elif kind is bool_:
                parts.append(b'{"value": true}' if node else b'{"value": false}')
            elif kind is int_:
                if not -bound < node < bound:
                    return b"", b"null", "output" + path + " is an int past 2**64, which judge does not compare", 0
                parts.append(b'{"value": %d}' % node)
            elif kind is float_:
                text = b"%a" % node
                parts.append(b'{"float": "%s"}' % text if text in nonfinite else b'{"value": %s}' % text)
            elif kind is tuple_ or kind is list_ or kind is dict_:
                items = list_(dict_items(node)) if kind is dict_ else node
                parts.append(b'{"tuple": [' if kind is tuple_ else b'{"list": [' if kind is list_ else b'{"dict": [')
                stack.append((-1, b"]}", ""))
                for i in reversed_(range_(length(items))):
                    if kind is dict_:
                        key, value = items[i]
                        if type_(key) is str_ and length(key) <= max_name:
                            key_text, where = encode(json_str(key)), path + "[" + repr_(key) + "]"
                        elif type_(key) is int_ and -bound < key < bound:
                            key_text, where = b"%d" % key, path + "[" + str_(key) + "]"
                        else:
                            return b"", b"null", ("output" + path + " is a dict with a key that is not a str (of at "
                                                  "most " + str_(max_name) + " characters) or an int"), 0
                        stack.append((-1, b"]", ""))
                        stack.append((depth + 1, value, where))
                        stack.append((-1, b"[" + key_text + b", ", ""))
                    else:
                        stack.append((depth + 1, items[i], path + "[" + str_(i) + "]"))
                    if i:
                        stack.append((-1, b", ", ""))
            else:
                meta = type_(kind)
                if meta is not type_:  # nothing is read of a class whose metaclass could run code
                    what = ("is a tensor subclass (" + name_of(kind) + "): judge copies plain tensors only"
                            if meta is tensor_meta else "is a " + name_of(kind) + ": " + outputs)
                    return b"", b"null", "output" + path + " " + what, 0
                fields = dict_get(named, kind)
                if fields is None:
                    fields, what = fields_of(kind, node)
                    if what:
                        return b"", b"null", "output" + path + " " + what, 0
                items = tuple_items(node, whole)  # tuple's own slot: an exact tuple of the items it holds
                parts.append(b'{"fields": %s, "tuple": [' % fields)
                stack.append((-1, b"]}", ""))
                for i in reversed_(range_(length(items))):
                    stack.append((depth + 1, items[i], path + "[" + str_(i) + "]"))
                    if i:
                        stack.append((-1, b", ", ""))
        ends = {"device": 0, "host": 0}
        leaves, extra = [], 0
        for leaf in flat:
            if layout(leaf) is not strided or is_conj(leaf) or is_neg(leaf):
                return b"", b"null", "an output tensor is not a plain strided tensor", 0
            dtype = dtype_of(leaf)
            if dtype not in dtypes:
                return b"", b"null", "an output tensor has a dtype judge does not compare", 0
            shape, stride = list_(size_of(leaf)), list_(stride_of(leaf))
            if length(shape) > 8:
                return b"", b"null", "an output tensor has more than 8 dimensions", 0
            size = element_size(leaf)
            reach = 0
            for n, step in zip_(shape, stride):
                reach += (n - 1) * step
            nbytes = 0 if 0 in shape else (1 + reach) * size
            area = "device" if is_cuda(leaf) else "host"
            raw, capacity = outboxes[area]
            offset = ends[area]
            if area == "device" and offset + nbytes > capacity:  # past the reference's bytes: the host outbox's
                area = "host"
                raw, capacity = outboxes[area]
                offset = ends[area]
            if offset + nbytes > capacity:
                return b"", b"null", "the output is larger than the outbox judge sized from the reference's outputs", 0
            if nbytes:
                copy_(as_strided(view(getitem(raw, slice_(offset, offset + nbytes)), dtype), shape, stride), leaf)
            ends[area] = offset + -(-max_(nbytes, 1) // 4096) * 4096
            leaves.append(b'["%s", %d, %d, %a, %a]' % (area.encode(), dtypes.index(dtype), offset, shape, stride))
            extra += nbytes
        return join(leaves), concat(parts), "", extra

    return take

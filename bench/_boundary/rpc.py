"""The wire between the two processes of the boundary prototype: values or proxies.

Symmetric: the hidden-test side (trusted) and the code-under-test side (untrusted) each hold
an `Endpoint` on a pair of pipes. A request is ``("q", op, args)``; the answer ``("a", value)``
or ``("e", exception)``. While a side waits for its answer it serves requests from the other
(callbacks: a test function handed to the code under test is called back the same way), so
nesting is strictly last-in first-out; both sides are single-threaded.

Encoding (`Endpoint.enc` / `dec`): exact builtin atoms (None, bool, int, float, complex, str,
bytes) and exact list/tuple/dict/set/frozenset of them cross as *values* (copies). Anything
else crosses as a *handle* into the owner's object table; the receiver gets a `Proxy` (or the
original object when the handle is its own). Exception classes and instances are mirrored as
local exception types (so ``pytest.raises(pkg.Error)`` and ``except`` work on the test side).
The frames are `marshal` of tagged tuples; `dec` accepts only the tags below and refuses any
other type (marshal can carry code objects: never executed, refused). A production wire would
use a format with no code type at all.

Equality (`STRICT_EQ`): the test side never runs the code under test's ``__eq__`` against a
plain expected value. A proxy compared with a plain value compares the *builtin base value*
the object carries (a str/int/tuple/... subclass: read with the base type's C slot in the
untrusted process, compared here with the builtin ``==``); an object that is no builtin value
compares unequal. Proxy-vs-proxy comparisons run remotely (the untrusted ``__eq__``), and
their result is read back as a value.
"""
from __future__ import annotations

import builtins
import marshal
import operator
import os
import struct
import sys
import weakref

ATOMS = (type(None), bool, int, float, complex, str, bytes)
CONTAINERS = (list, tuple, dict, set, frozenset)
BASE_TYPES = (str, int, float, complex, bytes, tuple, list, dict, set, frozenset)
MAX_DEPTH = 40
STRICT_EQ = os.environ.get("RLVR_BOUNDARY_EQ", "strict") == "strict"
STATS = {"calls": 0, "proxies": 0, "callbacks": 0}


class WireError(Exception):
    pass


def _builtin_exc(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, BaseException) and getattr(builtins, cls.__name__, None) is cls


class Endpoint:
    def __init__(self, rfd: int, wfd: int, side: str):
        self.r = os.fdopen(rfd, "rb", buffering=1 << 16)
        self.w = os.fdopen(wfd, "wb", buffering=1 << 16)
        self.side = side
        self.objs: dict[int, object] = {}       # my handle -> my object (strong)
        self.ids: dict[int, int] = {}           # id(my object) -> my handle
        self.proxies: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
        self.mirrors: dict[int, type] = {}      # their exception-class handle -> local type
        self.mirror_of: dict[type, int] = {}
        self.next_id = 1

    # ---- framing ---------------------------------------------------------------------------
    def send(self, msg) -> None:
        data = marshal.dumps(msg, 4)
        self.w.write(struct.pack("<I", len(data)) + data)
        self.w.flush()

    def recv(self):
        head = self.r.read(4)
        if len(head) < 4:
            raise EOFError("peer closed")
        (n,) = struct.unpack("<I", head)
        data = self.r.read(n)
        if len(data) < n:
            raise EOFError("peer closed")
        return marshal.loads(data)

    # ---- encoding --------------------------------------------------------------------------
    def handle(self, obj) -> int:
        key = id(obj)
        h = self.ids.get(key)
        if h is None or self.objs.get(h) is not obj:
            h = self.next_id
            self.next_id += 1
            self.objs[h] = obj
            self.ids[key] = h
        return h

    def enc(self, x, depth: int = 0):
        t = type(x)
        if t in ATOMS:
            return x
        if depth < MAX_DEPTH:
            if t is list:
                return ("l", [self.enc(v, depth + 1) for v in x])
            if t is tuple:
                return ("t", [self.enc(v, depth + 1) for v in x])
            if t is dict:
                return ("d", [(self.enc(k, depth + 1), self.enc(v, depth + 1)) for k, v in x.items()])
            if t is set:
                return ("s", [self.enc(v, depth + 1) for v in x])
            if t is frozenset:
                return ("f", [self.enc(v, depth + 1) for v in x])
        if isinstance(x, Proxy) and object.__getattribute__(x, "_ep") is self:
            return ("h", object.__getattribute__(x, "_id"))
        if isinstance(x, ProxyModule) and x.__dict__.get("_ep") is self:
            return ("h", x.__dict__["_id"])
        if isinstance(x, type) and x in self.mirror_of:
            return ("h", self.mirror_of[x])
        if isinstance(x, BaseException) and type(x) in self.mirror_of and hasattr(x, "_rlvr_ref"):
            return ("h", x._rlvr_ref)
        if isinstance(x, type) and issubclass(x, BaseException):
            if _builtin_exc(x):
                return ("B", x.__name__)
            bases = [self.enc(b, depth + 1) for b in x.__bases__ if issubclass(b, BaseException)]
            return ("X", self.handle(x), x.__name__, x.__qualname__, str(getattr(x, "__module__", "")), bases)
        if isinstance(x, BaseException):
            try:
                args = self.enc(tuple(x.args), depth + 1)
            except Exception:
                args = ("t", [])
            return ("E", self.handle(x), self.enc(type(x), depth + 1), args)
        kind = "m" if isinstance(x, type(sys)) else "c" if isinstance(x, type) else "o"
        pkg = kind == "m" and hasattr(x, "__path__")
        STATS["proxies"] += 1
        shape = [n for n in OPTIONAL if getattr(t, n, None) is not None]
        if getattr(t, "__hash__", None) is None:
            shape.append("nohash")
        return ("r", self.handle(x), kind, pkg, str(x.__name__) if kind == "m" else t.__name__, shape)

    def dec(self, v):
        t = type(v)
        if t in ATOMS:
            return v
        if t is not tuple or not v or type(v[0]) is not str:
            raise WireError(f"refused wire type {t.__name__}")
        tag = v[0]
        if tag == "l":
            return [self.dec(e) for e in v[1]]
        if tag == "t":
            return tuple(self.dec(e) for e in v[1])
        if tag == "d":
            return {self.dec(k): self.dec(e) for k, e in v[1]}
        if tag == "s":
            return {self.dec(e) for e in v[1]}
        if tag == "f":
            return frozenset(self.dec(e) for e in v[1])
        if tag == "h":
            return self.objs[v[1]]
        if tag == "B":
            cls = getattr(builtins, v[1], None)
            if not _builtin_exc(cls):
                raise WireError(f"not a builtin exception: {v[1]!r}")
            return cls
        if tag == "X":
            _, h, name, qualname, module, bases = v
            cls = self.mirrors.get(h)
            if cls is None:
                bases_t = tuple(self.dec(b) for b in bases) or (Exception,)
                try:
                    cls = type(str(name), bases_t, {"__module__": str(module), "__qualname__": str(qualname),
                                                    "__getattr__": _mirror_getattr, "_rlvr_mirror": True})
                except TypeError:  # layout conflict between builtin bases
                    cls = type(str(name), (Exception,), {"__module__": str(module), "__getattr__": _mirror_getattr})
                self.mirrors[h] = cls
                self.mirror_of[cls] = h
            return cls
        if tag == "E":
            _, h, cls_v, args_v = v
            cls = self.dec(cls_v)
            args = self.dec(args_v)
            exc = cls.__new__(cls, *args) if not _builtin_exc(cls) else None
            if exc is None:
                try:
                    exc = cls(*args)
                except Exception:
                    exc = cls.__new__(cls)
            exc.args = args
            try:
                exc._rlvr_ref = h
                exc._rlvr_ep = self
            except Exception:
                pass
            return exc
        if tag == "r":
            _, h, kind, pkg, tname, shape = v
            p = self.proxies.get(h)
            if p is None:
                if kind == "m":
                    p = ProxyModule(str(tname))
                    object.__setattr__(p, "_ep", self)
                    object.__setattr__(p, "_id", h)
                    if pkg:
                        object.__setattr__(p, "__path__", [])
                else:
                    cls = _shape_class(tuple(str(n) for n in shape))
                    p = cls.__new__(cls)
                    object.__setattr__(p, "_ep", self)
                    object.__setattr__(p, "_id", h)
                self.proxies[h] = p
            return p
        raise WireError(f"refused wire tag {tag!r}")

    # ---- calls -----------------------------------------------------------------------------
    def call(self, op: str, *args):
        STATS["calls"] += 1
        self.send(("q", op, self.enc(args)))
        while True:
            msg = self.recv()
            kind = msg[0]
            if kind == "a":
                return self.dec(msg[1])
            if kind == "e":
                raise self.dec(msg[1])
            if kind == "q":
                self.serve_one(msg)
            else:
                raise WireError(f"bad frame {kind!r}")

    def serve_one(self, msg) -> None:
        STATS["callbacks"] += 1
        _, op, args = msg
        try:
            fn = OPS[op]
            args = self.dec(args)
            if self.side == "tests":
                _check_untrusted_request(op, args)
            result = fn(self, *args)
            out = ("a", self.enc(result))
        except BaseException as exc:  # noqa: BLE001 - everything crosses back
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and op != "call":
                raise
            try:
                out = ("e", self.enc(exc))
            except Exception as enc_exc:  # noqa: BLE001
                out = ("e", self.enc(RuntimeError(f"unencodable exception: {enc_exc!r}")))
        self.send(out)

    def serve_forever(self) -> None:
        while True:
            try:
                msg = self.recv()
            except EOFError:
                return
            if msg[0] != "q":
                raise WireError("unexpected answer")
            self.serve_one(msg)


def _mirror_getattr(self, name):
    ep = self.__dict__.get("_rlvr_ep")
    ref = self.__dict__.get("_rlvr_ref")
    if ep is None or name.startswith("__"):
        raise AttributeError(name)
    return ep.call("getattr_h", ref, name)


# What the test side serves the code under test: calls, iteration and operators on objects
# it handed over, attributes by public name (and the few dunders wrappers copy). Never an
# import, a setattr/delattr, or `__globals__`/`__code__`/`__closure__`/`__dict__`/`__self__`
# (the hidden module's namespace and constants are one attribute away from any test function).
TEST_SIDE_OPS = {"call", "op", "repr", "str", "format", "hash", "bool", "len", "iter", "next", "isinstance",
                 "issubclass", "getattr", "getattr_h", "int", "float", "index", "enter", "exit", "dunder"}
SAFE_DUNDERS = {"__name__", "__qualname__", "__doc__", "__module__", "__wrapped__", "__signature__",
                "__text_signature__", "__annotations__", "__len__", "__iter__", "__next__", "__reversed__"}
SAFE_OPERATORS = {"eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                  "lshift", "rshift", "and_", "or_", "xor", "matmul", "getitem", "contains", "neg", "pos", "abs",
                  "invert", "setitem", "delitem"}


class Refused(Exception):
    pass


def _check_untrusted_request(op, args) -> None:
    if op not in TEST_SIDE_OPS:
        raise Refused(f"boundary: op {op!r} refused to the code under test")
    if op in ("getattr", "getattr_h", "dunder"):
        name = args[1]
        if type(name) is not str or (name.startswith("__") and name not in SAFE_DUNDERS):
            raise Refused(f"boundary: attribute {name!r} refused to the code under test")
    if op == "op" and args[0] not in SAFE_OPERATORS:
        raise Refused(f"boundary: operator {args[0]!r} refused")


# ---- operations served (by whichever side owns the object) -----------------------------------
def _base_value(obj):
    """(True, builtin copy) if obj is an instance of a builtin value type, read with the base
    type's own C slots (no method of a subclass runs); else (False, None)."""
    for base in BASE_TYPES:
        if isinstance(obj, base):
            if base is str:
                return True, str.__str__(obj)
            if base is int:
                return True, int.__int__(obj) if type(obj) is not bool else bool(obj)
            if base is float:
                return True, float.__float__(obj)
            if base is complex:
                return True, complex.__complex__(obj)
            if base is bytes:
                return True, bytes.__getitem__(obj, slice(None))
            if base is tuple:
                return True, tuple.__getitem__(obj, slice(None))
            if base is list:
                return True, list.__getitem__(obj, slice(None))
            if base is dict:
                return True, dict(dict.items(obj))
            if base in (set, frozenset):
                return True, frozenset(base.__iter__(obj))
    return False, None


OPS = {
    "import": lambda ep, name: __import__("importlib").import_module(name),
    "getattr": lambda ep, o, n: getattr(o, n),
    "getattr_h": lambda ep, h, n: getattr(ep.objs[h], n),
    "setattr": lambda ep, o, n, v: setattr(o, n, v),
    "delattr": lambda ep, o, n: delattr(o, n),
    "call": lambda ep, o, a, k: o(*a, **k),
    "op": lambda ep, name, a: getattr(operator, name)(*a),
    "dunder": lambda ep, o, name, a: getattr(o, name)(*a),
    "repr": lambda ep, o: repr(o),
    "str": lambda ep, o: str(o),
    "format": lambda ep, o, spec: format(o, spec),
    "hash": lambda ep, o: hash(o),
    "bool": lambda ep, o: bool(o),
    "len": lambda ep, o: len(o),
    "iter": lambda ep, o: iter(o),
    "next": lambda ep, o: next(o),
    "isinstance": lambda ep, o, c: isinstance(o, c),
    "issubclass": lambda ep, c, k: issubclass(c, k),
    "dir": lambda ep, o: list(dir(o)),
    "base": lambda ep, o: _base_value(o),
    "int": lambda ep, o: int(o),
    "float": lambda ep, o: float(o),
    "index": lambda ep, o: operator.index(o),
    "enter": lambda ep, o: o.__enter__(),
    "exit": lambda ep, o, a, b, c: o.__exit__(a, b, c),
}


# ---- proxies -----------------------------------------------------------------------------------
def _ep(p):
    return object.__getattribute__(p, "_ep")


def _c(p, op, *args):
    return _ep(p).call(op, p, *args)


def _is_plain(x, depth=0) -> bool:
    t = type(x)
    if t in ATOMS:
        return True
    if t in CONTAINERS and depth < 4:
        items = x.items() if t is dict else x
        if t is dict:
            return all(_is_plain(k, depth + 1) and _is_plain(v, depth + 1) for k, v in items)
        return all(_is_plain(v, depth + 1) for v in items)
    return False


class Proxy:
    """A remote object. Attribute access, calls and the dunders below are forwarded."""
    __slots__ = ("_ep", "_id", "__weakref__")

    def __getattr__(self, name):
        return _c(self, "getattr", name)

    def __setattr__(self, name, value):
        _c(self, "setattr", name, value)

    def __delattr__(self, name):
        _c(self, "delattr", name)

    def __call__(self, *a, **k):
        return _c(self, "call", a, k)

    def __repr__(self):
        return _c(self, "repr")

    def __str__(self):
        return _c(self, "str")

    def __format__(self, spec):
        return _c(self, "format", spec)

    def __hash__(self):
        return _c(self, "hash")

    def __bool__(self):
        return _c(self, "bool")

    def __len__(self):
        return _c(self, "len")

    def __iter__(self):
        return _c(self, "iter")

    def __next__(self):
        return _c(self, "next")

    def __int__(self):
        return _c(self, "int")

    def __float__(self):
        return _c(self, "float")

    def __index__(self):
        return _c(self, "index")

    def __enter__(self):
        return _c(self, "enter")

    def __exit__(self, a, b, c):
        return _c(self, "exit", a, b, c)

    def __dir__(self):
        return _c(self, "dir")

    def __instancecheck__(self, inst):
        return _ep(self).call("isinstance", inst, self)

    def __subclasscheck__(self, cls):
        return _ep(self).call("issubclass", cls, self)

    def __reduce_ex__(self, proto):
        raise TypeError("a remote object cannot be pickled on the test side")

    def __eq__(self, other):
        return _cmp(self, other, "eq")

    def __ne__(self, other):
        return _cmp(self, other, "ne")


def _cmp(self, other, name):
    if STRICT_EQ and _ep(self).side == "tests" and _is_plain(other):
        ok, base = _c(self, "base")
        if not ok:
            return name == "ne"
        return base == other if name == "eq" else base != other
    return _ep(self).call("op", name, (self, other))


def _binop(name, reflected=False):
    if reflected:
        def f(self, other):
            return _ep(self).call("op", name, (other, self))
    else:
        def f(self, other):
            return _ep(self).call("op", name, (self, other))
    return f


for _n in ("lt", "le", "gt", "ge"):
    setattr(Proxy, f"__{_n}__", _binop(_n))
for _n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and", "or",
           "xor", "matmul"):
    _o = _n + "_" if _n in ("and", "or") else _n
    setattr(Proxy, f"__{_n}__", _binop(_o))
    setattr(Proxy, f"__r{_n}__", _binop(_o, reflected=True))
for _n in ("getitem", "contains"):
    setattr(Proxy, f"__{_n}__", _binop(_n))
Proxy.__setitem__ = lambda self, k, v: _ep(self).call("op", "setitem", (self, k, v))
Proxy.__delitem__ = lambda self, k: _ep(self).call("op", "delitem", (self, k))
Proxy.__neg__ = lambda self: _ep(self).call("op", "neg", (self,))
Proxy.__pos__ = lambda self: _ep(self).call("op", "pos", (self,))
Proxy.__abs__ = lambda self: _ep(self).call("op", "abs", (self,))
Proxy.__invert__ = lambda self: _ep(self).call("op", "invert", (self,))
Proxy.__reversed__ = lambda self: _c(self, "dunder", "__reversed__", ())


# Dunders a proxy has only when the remote object's type has them (so hasattr / duck typing
# on a proxy answers as on the object: a proxy of a non-sized object has no __len__).
OPTIONAL = ("__call__", "__len__", "__iter__", "__next__", "__getitem__", "__setitem__", "__delitem__",
            "__contains__", "__enter__", "__exit__", "__int__", "__float__", "__index__", "__reversed__",
            "__bool__", "__neg__", "__pos__", "__abs__", "__invert__",
            *[f"__{p}{n}__" for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift",
                                      "rshift", "and", "or", "xor", "matmul") for p in ("", "r")])
_FULL = {n: Proxy.__dict__[n] for n in OPTIONAL if n in Proxy.__dict__}
_SHAPES: dict = {}


def _shape_class(shape: tuple) -> type:
    cls = _SHAPES.get(shape)
    if cls is None:
        ns = {"__slots__": (), **{n: _FULL[n] for n in shape if n in _FULL}}
        if "nohash" in shape:
            ns["__hash__"] = None
        cls = _SHAPES[shape] = type("Proxy", (Proxy,), ns)
    return cls


for _n in list(_FULL):
    delattr(Proxy, _n)  # the base keeps only what every object has


class ProxyModule(type(sys)):
    """A remote module, put in the test side's sys.modules by the import hook."""

    def __getattr__(self, name):
        if name in ("__path__", "__spec__", "__loader__", "__wrapped__"):
            raise AttributeError(name)
        ep = self.__dict__.get("_ep")
        if ep is None:
            raise AttributeError(name)
        return ep.call("getattr", self, name)

    def __setattr__(self, name, value):
        if isinstance(value, ProxyModule) and "_ep" in self.__dict__:
            return  # the import system binding a submodule: the remote package already decided
        if name.startswith("__") or "_ep" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            self.__dict__["_ep"].call("setattr", self, name, value)

    def __delattr__(self, name):
        if name in self.__dict__:
            object.__delattr__(self, name)
        else:
            self.__dict__["_ep"].call("delattr", self, name)

    def __dir__(self):
        return self.__dict__["_ep"].call("dir", self)

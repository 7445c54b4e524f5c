"""Python binding of sluice's in-process C API (include/sluice/sluice.h) through ctypes.

    import sluice
    with sluice.Model("models/demo-reranker", threads=2) as m:
        print(m.score_pairs(["How do salmon swim?"], ["Salmon swim up the cold river."]))

The library is found through $SLUICE_LIBRARY (a path to libsluice.so), else the system's
library path (ctypes.util.find_library). Results are those of `sluice score|embed|classify`
bit for bit (docs/c-api.md). Errors raise sluice.Error with the C status code and message.
A Model may be used from several Python threads; calls release the GIL while sluice runs,
and close() waits for the calls in progress.
"""

import contextlib
import ctypes
import ctypes.util
import os
import threading

API_VERSION_MAJOR = 1
API_VERSION_MINOR = 0
API_VERSION = API_VERSION_MAJOR * 1000 + API_VERSION_MINOR

STATUS_NAMES = {
    0: "OK", 1: "INVALID_ARGUMENT", 2: "NOT_FOUND", 3: "FAILED_PRECONDITION",
    4: "OUT_OF_RANGE", 5: "RESOURCE_EXHAUSTED", 6: "UNAVAILABLE", 7: "UNSUPPORTED",
    8: "INTERNAL", 9: "VERSION",
}


class Error(Exception):
    """A failed sluice call: .code (the sluice_status value), .name, .message."""

    def __init__(self, code, message):
        self.code = code
        self.name = STATUS_NAMES.get(code, "UNKNOWN")
        self.message = message
        super().__init__(f"{self.name}: {message}")


class _LoadOptions(ctypes.Structure):
    _fields_ = [("api_version", ctypes.c_uint32), ("dtype", ctypes.c_char_p),
                ("device", ctypes.c_char_p), ("task", ctypes.c_char_p),
                ("threads", ctypes.c_int32), ("max_batch_tokens", ctypes.c_int64),
                ("max_num_seqs", ctypes.c_int32)]


class _ModelInfo(ctypes.Structure):
    _fields_ = [("task", ctypes.c_char_p), ("architecture", ctypes.c_char_p),
                ("dtype", ctypes.c_char_p), ("device", ctypes.c_char_p),
                ("output_dim", ctypes.c_int32), ("num_labels", ctypes.c_int32),
                ("max_sequence_length", ctypes.c_int32), ("has_tokenizer", ctypes.c_int32),
                ("multi_vector", ctypes.c_int32)]


class _Input(ctypes.Structure):
    _fields_ = [("text", ctypes.c_char_p), ("text_pair", ctypes.c_char_p),
                ("ids", ctypes.POINTER(ctypes.c_int32)), ("num_ids", ctypes.c_size_t),
                ("type_ids", ctypes.POINTER(ctypes.c_int32))]


class _RunOptions(ctypes.Structure):
    _fields_ = [("api_version", ctypes.c_uint32), ("truncate", ctypes.c_int32),
                ("normalize", ctypes.c_int32), ("dimensions", ctypes.c_int32)]


_lib = None
_lib_lock = threading.Lock()


def load_library(path=None):
    """Loads libsluice (path, else $SLUICE_LIBRARY, else the system's) once; returns it."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = path or os.environ.get("SLUICE_LIBRARY") or ctypes.util.find_library("sluice")
        if not path:
            raise OSError("libsluice not found: set SLUICE_LIBRARY to the path of libsluice.so")
        lib = ctypes.CDLL(path)
        P = ctypes.POINTER
        c_size_p = P(ctypes.c_size_t)
        sig = {
            "sluice_api_version": (ctypes.c_uint32, []),
            "sluice_version": (ctypes.c_char_p, []),
            "sluice_last_error": (ctypes.c_char_p, []),
            "sluice_status_name": (ctypes.c_char_p, [ctypes.c_int]),
            "sluice_model_load": (ctypes.c_int, [ctypes.c_char_p, P(_LoadOptions),
                                                 P(ctypes.c_void_p)]),
            "sluice_model_free": (None, [ctypes.c_void_p]),
            "sluice_model_get_info": (ctypes.c_int, [ctypes.c_void_p, P(_ModelInfo)]),
            "sluice_model_label": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_size_t]),
            "sluice_score": (ctypes.c_int, [ctypes.c_void_p, P(_Input), ctypes.c_size_t,
                                            P(_RunOptions), P(ctypes.c_float)]),
            "sluice_score_pairs": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_char_p),
                                                  P(ctypes.c_char_p), ctypes.c_size_t,
                                                  P(ctypes.c_float)]),
            "sluice_embed": (ctypes.c_int, [ctypes.c_void_p, P(_Input), ctypes.c_size_t,
                                            P(_RunOptions), P(ctypes.c_void_p)]),
            "sluice_classify": (ctypes.c_int, [ctypes.c_void_p, P(_Input), ctypes.c_size_t,
                                               P(_RunOptions), P(ctypes.c_void_p)]),
            "sluice_result_count": (ctypes.c_size_t, [ctypes.c_void_p]),
            "sluice_result_values": (P(ctypes.c_float), [ctypes.c_void_p, ctypes.c_size_t,
                                                         c_size_p, c_size_p]),
            "sluice_result_logits": (P(ctypes.c_float), [ctypes.c_void_p, ctypes.c_size_t,
                                                         c_size_p]),
            "sluice_result_label": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_size_t]),
            "sluice_result_labels_over_threshold": (P(ctypes.c_int32), [
                ctypes.c_void_p, ctypes.c_size_t, c_size_p]),
            "sluice_result_free": (None, [ctypes.c_void_p]),
            "sluice_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                               ctypes.c_char_p, ctypes.c_int,
                                               P(ctypes.c_void_p)]),
            "sluice_tokens_count": (ctypes.c_size_t, [ctypes.c_void_p]),
            "sluice_tokens_ids": (P(ctypes.c_int32), [ctypes.c_void_p]),
            "sluice_tokens_type_ids": (P(ctypes.c_int32), [ctypes.c_void_p]),
            "sluice_tokens_offsets": (P(ctypes.c_uint32), [ctypes.c_void_p]),
            "sluice_tokens_token": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_size_t]),
            "sluice_tokens_free": (None, [ctypes.c_void_p]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        v = lib.sluice_api_version()
        if v // 1000 != API_VERSION_MAJOR or v % 1000 < API_VERSION_MINOR:
            raise OSError(f"{path} implements sluice C API {v // 1000}.{v % 1000}; this binding "
                          f"needs {API_VERSION_MAJOR}.{API_VERSION_MINOR}")
        _lib = lib
        return lib


def _check(code):
    if code != 0:
        raise Error(code, _lib.sluice_last_error().decode("utf-8", "replace"))


def _enc(s):
    return None if s is None else s.encode("utf-8")


def _inputs(items):
    """Inputs: str (text), (str, str) (a text pair), or a dict {"ids": [...], "type_ids":
    [...]} / a list of token ids. Returns the ctypes array and the buffers it points into."""
    arr = (_Input * max(len(items), 1))()
    keep = []
    for i, it in enumerate(items):
        if isinstance(it, str):
            b = _enc(it)
            keep.append(b)
            arr[i].text = b
        elif isinstance(it, tuple):
            a, p = _enc(it[0]), _enc(it[1])
            keep += [a, p]
            arr[i].text, arr[i].text_pair = a, p
        else:
            ids = it["ids"] if isinstance(it, dict) else it
            types = it.get("type_ids") if isinstance(it, dict) else None
            buf = (ctypes.c_int32 * max(len(ids), 1))(*ids)
            keep.append(buf)
            arr[i].ids = buf
            arr[i].num_ids = len(ids)
            if types:  # None or [] = all 0, as the CLI reads "token_type_ids": []
                if len(types) != len(ids):
                    raise ValueError("type_ids and ids differ in length")
                tbuf = (ctypes.c_int32 * max(len(types), 1))(*types)
                keep.append(tbuf)
                arr[i].type_ids = tbuf
    return arr, keep


def _run_options(truncate, normalize, dimensions):
    o = _RunOptions()
    o.api_version = API_VERSION
    o.truncate = 1 if truncate else 0
    o.normalize = -1 if normalize is None else (1 if normalize else 0)
    o.dimensions = dimensions
    return o


class Model:
    """A loaded model directory. task: None (the architecture's default), "embed",
    "classify" or "score"; dtype: "auto", "float32", "bfloat16", "float16", "int8" (CPU);
    device: "cpu", "cuda[:N]"; threads: 0 = all cores."""

    def __init__(self, model_dir, task=None, dtype=None, device=None, threads=0,
                 max_batch_tokens=0, max_num_seqs=0, library=None):
        lib = load_library(library)
        o = _LoadOptions()
        o.api_version = API_VERSION
        o.dtype, o.device, o.task = _enc(dtype), _enc(device), _enc(task)
        o.threads, o.max_batch_tokens, o.max_num_seqs = threads, max_batch_tokens, max_num_seqs
        self._h = None
        self._cv = threading.Condition()
        self._calls = 0
        h = ctypes.c_void_p()
        _check(lib.sluice_model_load(_enc(str(model_dir)), ctypes.byref(o), ctypes.byref(h)))
        self._h = h
        info = _ModelInfo()
        _check(lib.sluice_model_get_info(h, ctypes.byref(info)))
        self.task = info.task.decode()
        self.architecture = info.architecture.decode()
        self.dtype = info.dtype.decode()
        self.device = info.device.decode()
        self.output_dim = info.output_dim
        self.max_sequence_length = info.max_sequence_length
        self.has_tokenizer = bool(info.has_tokenizer)
        self.multi_vector = bool(info.multi_vector)
        self.labels = [lib.sluice_model_label(h, k).decode() for k in range(info.num_labels)]

    def close(self):
        """Frees the model once the calls in progress are done; later calls raise."""
        with self._cv:
            while self._calls:
                self._cv.wait()
            if self._h:
                _lib.sluice_model_free(self._h)
                self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None):
            self.close()

    @contextlib.contextmanager
    def _use(self):
        """The handle, held open (close() waits) for the duration of a call."""
        with self._cv:
            if not self._h:
                raise ValueError("the model is closed")
            self._calls += 1
            h = self._h
        try:
            yield h
        finally:
            with self._cv:
                self._calls -= 1
                if not self._calls:
                    self._cv.notify_all()

    def score_pairs(self, queries, documents):
        """Scores of the text pairs (queries[i], documents[i]), as a list of floats."""
        if len(queries) != len(documents):
            raise ValueError("queries and documents differ in length")
        n = len(queries)
        q = (ctypes.c_char_p * max(n, 1))(*[_enc(s) for s in queries])
        d = (ctypes.c_char_p * max(n, 1))(*[_enc(s) for s in documents])
        out = (ctypes.c_float * max(n, 1))()
        with self._use() as h:
            _check(_lib.sluice_score_pairs(h, q, d, n, out))
        return list(out[:n])

    def score(self, inputs, truncate=False):
        """Scores of inputs (see _inputs for their forms), as a list of floats."""
        arr, _keep = _inputs(inputs)
        out = (ctypes.c_float * max(len(inputs), 1))()
        o = _run_options(truncate, None, 0)
        with self._use() as h:
            _check(_lib.sluice_score(h, arr, len(inputs), ctypes.byref(o), out))
        return list(out[:len(inputs)])

    def _result(self, fn, inputs, opts):
        arr, _keep = _inputs(inputs)
        r = ctypes.c_void_p()
        with self._use() as h:
            _check(fn(h, arr, len(inputs), ctypes.byref(opts), ctypes.byref(r)))
        return r

    def embed(self, inputs, normalize=None, dimensions=0, truncate=False):
        """One vector (a list of floats) per input; token-level pooling gives a list of
        vectors per input. normalize: None = the model's default."""
        r = self._result(_lib.sluice_embed, inputs, _run_options(truncate, normalize,
                                                                 dimensions))
        try:
            out = []
            rows, dim = ctypes.c_size_t(), ctypes.c_size_t()
            for i in range(_lib.sluice_result_count(r)):
                p = _lib.sluice_result_values(r, i, ctypes.byref(rows), ctypes.byref(dim))
                flat = p[:rows.value * dim.value]
                if rows.value == 1 and not self.multi_vector:
                    out.append(flat)
                else:
                    out.append([flat[k * dim.value:(k + 1) * dim.value]
                                for k in range(rows.value)])
            return out
        finally:
            _lib.sluice_result_free(r)

    def classify(self, inputs, truncate=False):
        """Per input a dict: label (name), index, probs, logits, and labels (over their
        thresholds, for models with thresholds)."""
        r = self._result(_lib.sluice_classify, inputs, _run_options(truncate, None, 0))
        try:
            out = []
            rows, dim, n = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
            for i in range(_lib.sluice_result_count(r)):
                p = _lib.sluice_result_values(r, i, ctypes.byref(rows), ctypes.byref(dim))
                lg = _lib.sluice_result_logits(r, i, ctypes.byref(n))
                best = _lib.sluice_result_label(r, i)
                ov = _lib.sluice_result_labels_over_threshold(r, i, ctypes.byref(n))
                over = [ov[k] for k in range(n.value)]
                name = lambda k: self.labels[k] if k < len(self.labels) else str(k)
                out.append({"index": best, "label": name(best), "probs": p[:dim.value],
                            "logits": lg[:dim.value], "labels": [name(k) for k in over]})
            return out
        finally:
            _lib.sluice_result_free(r)

    def tokenize(self, text, text_pair=None, add_special_tokens=True):
        """{"ids", "type_ids", "tokens", "offsets"} of the model's tokenizer."""
        t = ctypes.c_void_p()
        with self._use() as h:
            _check(_lib.sluice_tokenize(h, _enc(text), _enc(text_pair),
                                        1 if add_special_tokens else 0, ctypes.byref(t)))
        try:
            n = _lib.sluice_tokens_count(t)
            ids = _lib.sluice_tokens_ids(t)
            types = _lib.sluice_tokens_type_ids(t)
            offs = _lib.sluice_tokens_offsets(t)
            return {"ids": ids[:n], "type_ids": types[:n],
                    "tokens": [_lib.sluice_tokens_token(t, i).decode("utf-8", "replace")
                               for i in range(n)],
                    "offsets": [(offs[2 * i], offs[2 * i + 1]) for i in range(n)]}
        finally:
            _lib.sluice_tokens_free(t)

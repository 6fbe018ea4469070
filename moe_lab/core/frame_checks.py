"""The frames the analysis layer's public functions take (the notebooks' API): a DataFrame
holding the columns a function reads, its numbers' columns holding numbers; re-exported by
core.validate, the one place the API's values are checked."""
from __future__ import annotations


NUMERIC = ("median_us", "tokens", "tp", "ep", "roof_us", "floor_us", "measured_us", "over_us")


def _lacking(value, needs, name: str) -> str:
    """The one line saying which of the columns `needs` the frame `value` lacks ("" if none);
    UsageError when `value` is no DataFrame."""
    from .errors import UsageError
    cols = getattr(value, "columns", None)
    if cols is None or not hasattr(value, "index"):
        raise UsageError(f"{name}: give a DataFrame, not "
                         f"{'None' if value is None else type(value).__name__}")
    import numbers
    missing = [c for c in needs if c not in cols]
    if not missing:  # a column of numbers holding text (a frame read as str): one line too
        bad = [c for c in NUMERIC if c in cols and len(value) and value[c].dtype == object
               and not value[c].map(lambda v: isinstance(v, (numbers.Number, type(None)))).all()]
        return f"{name}: its column {bad[0]} holds non-numbers; give the rows as read" if bad \
            else ""
    has = [str(c) for c in cols]
    return (f"{name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"(it has: {', '.join(has[:12]) + (', ...' if len(has) > 12 else '') or 'none'})")


def frame(value, needs, name: str):
    """`value` as a DataFrame holding the columns `needs`; UsageError (one line) naming
    `name` (the function and argument) and the columns it lacks."""
    from .errors import UsageError
    why = _lacking(value, needs, name)
    if why:
        raise UsageError(why)
    return value


def frames(where: str | None = None, **needs):
    """Decorator of a public function taking DataFrames: each argument named in `needs` (a
    tuple of columns, or a function of the bound arguments giving them) is checked before
    the call (frame()). Before, a frame without them raised pandas' KeyError of the first
    one from deep inside. None is passed on unchecked where the parameter takes it (its
    default is None, or its annotation names None) and refused elsewhere (was: a TypeError
    or AttributeError from inside). A frame without rows is handed on as it is (many
    answer it with an empty result, whatever its columns); a KeyError it then raises is
    the UsageError naming what it lacks."""
    def deco(fn):
        import functools
        import inspect
        sig = inspect.signature(fn)
        name = where or f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
        takes_none = {a for a in needs if sig.parameters[a].default is None
                      or "None" in str(sig.parameters[a].annotation)}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            from .errors import UsageError
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)  # Python's own message for a wrong call
            bound.apply_defaults()
            later = ""
            for arg, cols in needs.items():
                value = bound.arguments.get(arg)
                if value is None and arg in takes_none:
                    continue
                why = _lacking(value, cols(bound.arguments) if callable(cols) else cols,
                               f"{name}: {arg}")
                if why and len(value):
                    raise UsageError(why)
                later = later or why
            if not later:
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except KeyError:
                raise UsageError(later) from None
        return wrapper
    return deco

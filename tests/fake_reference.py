"""A reference that is wrong the way transformers 5.17 made it wrong, for the harness's own tests (its own module: the
other fake runners need neither torch nor transformers)."""

from runners.transformers_eager import Runner as TransformersEager


class ReferenceThatIgnoresItsCache(TransformersEager):
    """transformers eager, except that its cache goes to a keyword the forward does not name, which transformers drops
    into **kwargs without a word: what 5.17 did with `cache=`. Every token is then computed with no context."""

    def load(self):
        import runners.transformers_eager as eager

        eager.cache_keyword = lambda model: "kv_cache_this_release_does_not_read"
        super().load()

"""Exercise 2701: the cache-aware choice of sglang-router, over an approximate prefix tree."""


def cache_aware_route(texts, num_workers, loads=None, cache_threshold=0.5, balance_abs=32,
                      balance_rel=1.5):
    # TODO 1: 参数检查：ValueError（num_workers < 1，loads 的形状不对，cache_threshold 不在 [0, 1]）
    # TODO 2: 一棵逐字符的前缀树：每个节点记 {服务: 最近一次碰它的请求编号}；每个服务的树大小
    # TODO 3: 对每个请求：负载失衡 -> 负载最小的服务；否则最长匹配的比例 > cache_threshold -> 最近碰过
    #         这个前缀的服务；否则树最小的服务
    # TODO 4: 把文本记给选中的服务（更新路径上每个节点的时间，第一次碰到的节点让树大小加一）
    raise NotImplementedError("请实现 cache_aware_route")

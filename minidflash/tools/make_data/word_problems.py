"""Word problems for the chat training prompts (``chat_prompts``): templates whose names and
numbers are drawn, GSM8K's kind of question without its items.

The templates and the lists they draw from are data, in ``chat_prompts/`` beside this module:

* ``stories.json``: multi-step situations (rates, percentages, fractions of what is left, ages,
  time, recipes, distances ...): ``STORIES``.
* ``chains.json``: what GSM8K asks that the stories never do: comparisons chained through
  several people ("5 fewer than 3 times as many"), working back from what is left, a person
  told of by pronoun, numbers in words, cents and decimals, units to convert (yards, ounces,
  dozens), a percentage of a percentage, weekly schedules, two offers compared: ``CHAINS``.
* ``words.json``: the short lists the samplers draw names and things from; ``wide.json``: a
  long list for each of them (``WIDE``: what the wide kind of ``chat_prompts`` draws instead).
  A noun written ``"one/many"`` gives its singular and plural; a bare one takes an s.

A template is ``{"sampler": name, "question": text}``. Its question has the fields {a}, {b}, {c}
(three first names), {he}, {He}, {his}, {him} (the first one's pronouns; a question need not
use them), and those its sampler, the function ``_<name>`` below, returns: numbers drawn so that
every step comes out whole where it should, and things from the lists. ``word_problem`` draws
one problem of a table.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

DATA = Path(__file__).with_name("chat_prompts")     # the lists and templates (JSON)


def load(name: str):
    """A data file of ``chat_prompts/``, parsed."""
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def pairs(items: list[str]) -> list[tuple[str, str]]:
    """["box/boxes", "kite"] -> [("box", "boxes"), ("kite", "kites")]: singular/plural, a bare
    word taking an s."""
    out = []
    for item in items:
        one, _, many = item.partition("/")
        out.append((one, many or one + "s"))
    return out


_short, _long = load("words.json"), load("wide.json")
FIRST_NAMES = _short["first_names"]
SHE = set(_short["she"])
GOODS, JOBS, PLACES = pairs(_short["goods"]), _short["jobs"], _short["places"]
THINGS, FRUIT, ANIMALS = _short["things"], _short["fruit"], pairs(_short["animals"])
MONTHS = list(_short["months"].items())                     # (month, days)
NUMBER_WORDS = _short["number_words"]
TIMES_WORDS = {int(k): v for k, v in _short["times_words"].items()}
FRACTION_WORDS = {int(k): v for k, v in _short["fraction_words"].items()}
WIDE_GOODS, WIDE_THINGS, WIDE_FRUIT = pairs(_long["goods"]), _long["things"], _long["fruit"]
WIDE_ANIMALS, WIDE_JOBS, WIDE_PLACES = pairs(_long["animals"]), _long["jobs"], _long["places"]
WIDE_SHE, WIDE_HE = _long["she"], _long["he"]
WIDE_NAMES = WIDE_SHE + WIDE_HE
# (the short list a sampler asks for, the long one the wide kind gives it instead)
WIDE = [(GOODS, WIDE_GOODS), (THINGS, WIDE_THINGS), (FRUIT, WIDE_FRUIT),
        (ANIMALS, WIDE_ANIMALS), (JOBS, WIDE_JOBS), (PLACES, WIDE_PLACES),
        (FIRST_NAMES, WIDE_NAMES)]


def word_problem(table: list[tuple], rng: random.Random) -> str:
    """One problem of a (question, sampler) table: a template, three first names, the first
    one's pronouns, the sampler's fields; its first letter in upper case."""
    question, sample = rng.choice(table)
    a, b, c = rng.sample(FIRST_NAMES, 3)
    she = a in SHE or a in WIDE_SHE
    pronouns = dict(he="she" if she else "he", He="She" if she else "He",
                    his="her" if she else "his", him="her" if she else "him")
    text = question.format(a=a, b=b, c=c, **pronouns, **sample(rng))
    return text[0].upper() + text[1:]


# --------------------------------------------------------------------------------------------
# The stories' samplers, in the order of stories.json
# --------------------------------------------------------------------------------------------

def _goods(r):
    one, many = r.choice(GOODS)
    return many


def _sale(r):
    return dict(many=_goods(r), n=r.randint(3, 12), price=r.randint(4, 40),
                off=r.choice([10, 15, 20, 25, 30, 40, 50]))


def _wage(r):
    rate, h1, h2 = r.randint(6, 25), r.randint(2, 9), r.randint(2, 9)
    return dict(job=r.choice(JOBS), rate=rate, h1=h1, h2=h2, goal=rate * (h1 + h2) + r.randint(1, 30) * 5)


def _left_over(r):
    frac, word = r.choice([(2, "half"), (3, "a third"), (4, "a quarter"), (5, "a fifth")])
    total = frac * r.randint(4, 20)
    return dict(many=_goods(r), total=total, word=word, more=r.randint(2, total // frac))


def _drive(r):
    return dict(place=r.choice(PLACES), speed=r.choice([30, 40, 45, 50, 60, 64, 72]),
                hours=r.randint(2, 6), back=r.choice([20, 30, 40, 48]))


def _older(r):
    return dict(age=r.randint(6, 15), times=r.randint(2, 4), years=r.randint(3, 12))


def _recipe(r):
    return dict(serves=r.choice([4, 6, 8]), cups=r.choice([2, 3, 4]), eggs=r.randint(1, 4),
                want=r.choice([12, 16, 24, 32]),
                dish=r.choice(["pancakes", "muffins", "cookies", "waffles", "dumplings"]))


def _pages(r):
    per_day, days, extra = r.randint(10, 40), r.randint(3, 7), r.randint(10, 50)
    return dict(per_day=per_day, days=days, extra=extra,
                pages=per_day * days + extra + r.randint(2, 30) * 10)


def _times_as_many(r):
    return dict(many=_goods(r), n=r.randint(5, 30), times=r.randint(2, 4), fewer=r.randint(2, 9))


def _scores(r):
    scores = [r.randint(55, 100) for _ in range(r.randint(3, 5))]
    return dict(listed=", ".join(map(str, scores[:-1])) + f" and {scores[-1]}", n=len(scores),
                up=r.randint(1, 5))


def _tip(r):
    return dict(friends=r.randint(1, 5), bill=r.randint(30, 180), tip=r.choice([10, 15, 18, 20]))


def _fence(r):
    return dict(length=r.randint(5, 30), width=r.randint(3, 20), cost=r.randint(2, 12))


def _study(r):
    return dict(start=r.randint(7, 10), sessions=r.randint(2, 5),
                minutes=r.choice([25, 35, 40, 45, 50]), rest=r.choice([5, 10, 15]))


def _savings(r):
    weekly = r.randint(5, 30)
    return dict(start=r.randint(20, 200), weekly=weekly, weeks=r.randint(4, 12),
                spend=r.randint(2, 4 * weekly))


def _farm_legs(r):
    return dict(chickens=r.randint(5, 40), cows=r.randint(2, 15), sold=r.randint(1, 5))


def _fill_tank(r):
    return dict(size=r.choice([100, 120, 150, 200, 240, 300]), rate=r.randint(8, 20),
                leak=r.randint(1, 6))


def _share(r):
    return dict(total=r.randint(2, 20) * 60,
                **dict(zip(("num", "den"), r.choice([(1, 2), (2, 3), (3, 5), (1, 4)]))))


# --------------------------------------------------------------------------------------------
# The chains' samplers, in the order of chains.json
# --------------------------------------------------------------------------------------------

def _say(r, n: int) -> str:
    """A small number in digits or in words, as word problems mix them."""
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) and r.random() < 0.5 else str(n)


def _cents(r, lo: int, hi: int) -> str:
    """A price in dollars and cents, e.g. 1.25 or 0.80."""
    return f"{r.randint(lo, hi) * 5 / 100:.2f}"


def _working_back(r):
    while True:
        k, t, give = r.choice([2, 3, 4, 5]), r.randint(2, 12), r.randint(1, 9)
        if (k - 1) * t > give and ((k - 1) * t - give) % 2 == 0:
            return dict(many=r.choice(THINGS), part=FRACTION_WORDS[k], give=_say(r, give),
                        left=((k - 1) * t - give) // 2)


def _together(r):
    times, one = r.randint(2, 9), r.randint(5, 400)
    return dict(many=r.choice(THINGS), times=_say(r, times), total=one * (times + 1))


def _fewer_than_times(r):
    return dict(many=r.choice(THINGS), k=_say(r, r.randint(2, 9)),
                more=r.choice(["fewer", "more"]), times=TIMES_WORDS[r.randint(2, 5)],
                n=r.randint(8, 40), lost=_say(r, r.randint(1, 7)))


def _per_minutes(r):
    start, end = r.randint(7, 10), r.randint(1, 5)
    return dict(job=r.choice(JOBS), pay=r.randint(2, 9), per=r.choice([10, 15, 20, 30]),
                start=start, end=end, rest=r.choice([30, 45, 60]))


def _ages(r):
    b_more = r.randint(2, 12)
    n = r.randint(6, 40)
    if (n + b_more) % 2:
        n += 1
    return dict(n=n, more=b_more, years=r.randint(2, 15))


def _habit(r):
    how = r.choice(["half as long", "twice as long", "a third as long"])
    return dict(hours=r.choice([2, 3, 4, 6]), how=how, act1=r.choice(
        ["practising the piano", "playing soccer", "watching movies", "gardening", "painting"]),
        act2=r.choice(["reading", "writing in a journal", "stretching", "doing puzzles"]),
        times=_say(r, r.randint(2, 6)), weeks=r.randint(2, 8))


def _loan(r):
    return dict(asset=r.choice(["house", "shop", "boat", "farm"]),
                value=r.randint(5, 90) * 5000, p1=r.choice([20, 25, 30, 40, 50]),
                p2=r.choice([10, 20, 25, 40, 60, 75]),
                use=r.choice(["pay off a debt", "fix the roof", "buy a truck", "pay for school"]))


def _cents_discount(r):
    n = r.randint(6, 30)
    return dict(n=n, fruit=r.choice(FRUIT), c1=r.randint(20, 60), c2=r.randint(20, 60),
                off=r.randint(1, 3), p=r.choice([5, 10, 15, 20]))


def _change(r):
    f1, f2, f3 = r.sample(FRUIT, 3)
    return dict(n1=_say(r, r.randint(2, 8)), n2=_say(r, r.randint(2, 8)), n3=r.randint(2, 8),
                f1=f1, f2=f2, f3=f3, p1=_cents(r, 10, 60), p2=_cents(r, 10, 60),
                p3=_cents(r, 10, 60), bill=r.choice([20, 50]))


def _yards(r):
    yards = r.randint(2, 6)
    return dict(room=r.choice(["bedroom", "kitchen", "studio", "garage"]),
                area=3 * yards * r.randint(6, 20), yards=yards)


def _boxes(r):
    per = r.choice([4, 6, 8, 10, 12])
    return dict(n=per * r.randint(5, 40), per=per, box=r.choice([4, 8, 12, 16]),
                **dict(zip(("one", "ones"), r.choice([("jar of jam", "jars of jam"),
                   ("candle", "candles"), ("book", "books"), ("bottle of juice", "bottles of juice")]))),
                each=r.choice([1, 2, 4, 8]))


def _doubles(r):
    return dict(what=r.choice(["members of a chess club", "followers of a blog",
                               "plants in a pond", "bees in a hive"]),
                n=r.choice([5, 8, 10, 12, 20, 25]), months=r.randint(3, 6),
                month=r.choice(["April", "May", "June", "July"]))


def _paint(r):
    return dict(walls=_say(r, r.randint(2, 6)), w=r.randint(6, 14), h=r.choice([8, 9, 10]),
                cover=r.choice([20, 25, 40, 50]), cost=r.randint(8, 30))


def _offers(r):
    return dict(big=r.choice(["sofa", "piano", "used car", "laptop", "fridge"]),
                d1=r.randint(2, 15) * 50, n1=r.randint(3, 12), m1=r.randint(5, 40) * 10,
                d2=r.randint(2, 15) * 50, n2=r.randint(3, 12), m2=r.randint(5, 40) * 10)


def _feeding(r):
    (one1, many1), (one2, many2) = r.sample(ANIMALS, 2)
    return dict(n1=_say(r, r.randint(2, 8)), many1=many1, one1=one1,
                f1=r.choice([1, 2, 3, 5, 1.5, 2.5]), n2=_say(r, r.randint(2, 8)), many2=many2,
                one2=one2, f2=r.choice([1, 2, 4, 0.5]),
                unit=r.choice(["pounds", "kilograms"]), days=r.choice([7, 10, 14, 30]))


def _class_split(r):
    h1, h2, h3, h4 = r.sample(["baking", "chess", "basketball", "drawing", "music", "video games",
                               "swimming", "dancing"], 4)
    x, y = r.randint(3, 15), r.randint(3, 15)
    return dict(n=x + y + 3 * r.randint(3, 12), x=x, y=y, h1=h1, h2=h2, h3=h3, h4=h4)


def _votes(r):
    return dict(office=r.choice(["class president", "team captain", "club treasurer"]),
                n=r.choice([100, 200, 300, 400, 500]), p=r.choice([10, 20, 25, 30]),
                q=r.choice([20, 25, 50]))


def _profit(r):
    sell = r.randint(6, 20) * 10
    return dict(n=r.randint(10, 40), k=r.randint(5, 20), many=r.choice(["cupcakes", "bookmarks",
                "candy bars", "lemonades"]), sell=f"{sell / 100:.2f}",
                cost=f"{r.randint(2, sell // 10 - 1) * 10 / 100:.2f}")


def _shop_days(r):
    d1, d2 = r.sample(["Monday", "Tuesday", "Wednesday", "Thursday", "Sunday"], 2)
    return dict(shop=r.choice(["bike repair shop", "car wash", "bakery", "barber shop"]),
                k=r.randint(3, 25), d1=d1, d2=d2, p=r.randint(4, 30), weeks=r.randint(2, 5))


def _pets_month(r):
    month, _ = r.choice(MONTHS)
    return dict(n=_say(r, r.randint(2, 9)), pets=r.choice(["fish", "hamsters", "parrots",
                "turtles"]), p=r.choice([1, 2, 3, 0.5, 1.5]), month=month)


def _packs(r):
    n = r.randint(5, 12)
    return dict(n=_say(r, n), k=_say(r, r.randint(1, n - 1)), x=r.randint(4, 12),
                y=r.randint(13, 24), things=r.choice(["crayons", "markers", "pencils", "stickers"]))


def _rows(r):
    return dict(event=r.choice(["sports day", "science fair", "spring concert", "parade"]),
                schools=_say(r, r.randint(2, 8)), rows=r.randint(3, 10), per=r.randint(5, 12),
                seats=r.choice([30, 40, 45, 50]))


def _rides(r):
    return dict(s1=r.randint(8, 20), t1=r.choice([1.5, 2, 2.5, 3, 3.5, 4.5]),
                s2=r.randint(8, 20), t2=r.choice([1.5, 2, 2.5, 3, 3.5, 4.5]))


def _course(r):
    k, h, w = r.randint(2, 5), r.choice([1, 1.5, 2, 3]), r.randint(4, 10)
    return dict(course=r.choice(["cooking", "pottery", "guitar", "woodworking"]), k=_say(r, k),
                h=h, weeks=w, per=r.choice([0.5, 1, 1.5, 2, 3]))


def _ratio(r):
    r1, r2 = r.choice([(3, 2), (2, 1), (3, 1), (4, 3), (5, 3), (1, 4)])
    return dict(total=(r1 + r2) * r.randint(5, 60), r1=r1, r2=r2, spend=r.randint(2, 20),
                thing=r.choice(["a book", "a game", "lunch", "a gift"]))


def _weekdays(r):
    return dict(n=r.randint(10, 60), fruit=r.choice(FRUIT), times=TIMES_WORDS[r.randint(2, 4)],
                fewer=r.randint(2, 9))


def _bakery(r):
    return dict(k=r.choice([10, 20, 30, 40, 50]), times=_say(r, r.randint(3, 9)),
                n=r.randint(15, 90), many=r.choice(["loaves of bread", "bagels", "muffins"]))


def _together_work(r):
    r1 = 2 * r.randint(2, 8)
    return dict(task=r.choice([("place", "puzzle pieces"), ("fold", "paper cranes"),
                               ("plant", "tulip bulbs"), ("stack", "bricks")]),
                r1=r1, how=r.choice(["half as many", "twice as many", "the same number of"]),
                total=r1 * 3 * r.randint(5, 30))


def _price_rise(r):
    n = r.randint(5, 30)
    return dict(n=n, items=r.choice(["balloons", "tickets", "roses", "notebooks"]),
                total=n * r.randint(2, 40), up=r.randint(1, 10), m=r.randint(10, 200))


def _growth(r):
    return dict(club=r.choice(["chess club", "choir", "robotics team", "art class"]),
                n=r.randint(2, 30) * 10, p=r.choice([10, 20, 25, 30, 40, 50]))


def _weight(r):
    return dict(how=r.choice(["lost", "gained"]), k=r.randint(2, 12), m=_say(r, r.randint(2, 6)),
                w=r.randint(90, 220))


def _commission(r):
    tier = r.choice([500, 1000, 2000, 5000])
    return dict(p1=r.choice([5, 10, 20, 30]), tier=tier, p2=r.choice([5, 10, 15]),
                sold=tier + r.randint(1, 40) * 100)


def _scores_game(r):
    return dict(game=r.choice(["Scrabble", "a card game", "darts", "a quiz"]),
                p1=r.randint(100, 300), p2=r.randint(100, 300), s1=r.randint(5, 40),
                s2=r.randint(5, 40))


def _trays(r):
    per = r.choice([6, 8, 10, 12])
    return dict(bag=r.choice(["sprinkles", "frosting", "chocolate chips"]), per=per,
                n=_say(r, r.randint(2, 9)), tray=r.choice([6, 12, 24]),
                many=r.choice(["cupcakes", "cookies", "brownies"]))


def _daily_goal(r):
    days, first = r.choice([30, 28, 31, 14, 10]), r.randint(3, 9)
    return dict(goal=r.randint(10, 150) * 10, days=days, first=first, s1=r.randint(2, 20))


def _tank(r):
    k1, k2 = r.choice([(5, 3), (4, 2), (3, 3), (5, 2), (2, 2)])
    return dict(n=k1 * k2 * r.randint(2, 12), part=FRACTION_WORDS[k1], part2=FRACTION_WORDS[k2],
                fish=r.choice(["jellyfish", "goldfish", "guppies"]),
                color=r.choice(["striped", "spotted", "glowing"]))


def _bus(r):
    return dict(x=r.randint(2, 12), y=r.randint(2, 9), z=r.randint(2, 12), n=r.randint(15, 40))


def _cookies(r):
    c1, c2 = r.sample(["oatmeal", "chocolate chip", "sugar", "ginger", "peanut butter"], 2)
    return dict(x=r.randint(5, 15), y=r.randint(5, 15), c1=c1, c2=c2, e=_say(r, r.randint(1, 3)),
                g=_say(r, r.randint(1, 4)), k=r.randint(4, 24))


def _raise(r):
    return dict(x=r.randint(5, 60) * 10, d1=r.randint(2, 40) * 10, m=TIMES_WORDS[r.randint(2, 3)],
                cause=r.choice(["the school trip", "a new playground", "the animal shelter"]))


def _lift(r):
    return dict(w=r.choice([8, 10, 12, 20, 25, 40]), p=r.choice([20, 25, 50]),
                d=r.randint(2, 5))


def _shipping(r):
    return dict(thing=r.choice(["pair of boots", "lamp", "board game", "backpack"]),
                p1=r.randint(10, 60), s1=r.randint(2, 9), p2=r.randint(8, 55),
                m=TIMES_WORDS[r.randint(2, 3)])


def _repair(r):
    return dict(device=r.choice(["car", "washing machine", "bike", "laptop"]),
                p=r.randint(4, 40) * 10, off=r.choice([20, 25, 50, 75, 80]),
                rate=r.randint(3, 12) * 5, h=_say(r, r.randint(1, 5)))


def _dozens(r):
    return dict(d=_say(r, r.randint(2, 10)), many=r.choice(["eggs", "roses", "donuts", "cookies"]),
                price=_cents(r, 4, 30), kept=r.randint(1, 11))


def table(name: str) -> list[tuple]:
    """(question, sampler) for every template of ``chat_prompts/<name>``, in the file's order."""
    return [(t["question"], globals()["_" + t["sampler"]]) for t in load(name)]


STORIES = table("stories.json")
CHAINS = table("chains.json")

# CHAINS templates written in the shape of one suite item each (found by overlap.py: their draws
# share runs of eight words with it): 5 gsm8k:4, 18 gsm8k:95, 19 gsm8k:85, 22 gsm8k:54,
# 23 gsm8k:55, 26 gsm8k:76, 36 MT-Bench's bus riddle. Answers kept from them stay in data/ (earlier
# drafters read them); ``train`` drops every row made from them (``overlap.excluded``).
SUITE_SHAPED = tuple(CHAINS[i][0] for i in (5, 18, 19, 22, 23, 26, 36))


def template_regex(question: str) -> re.Pattern:
    """What every problem of a template matches: its words, any text where a field goes (the
    first letter in either case: ``word_problem`` capitalises it)."""
    body = re.sub(r"\\\{[^}]*\\\}", "(.+?)", re.escape(question))
    return re.compile(f"(?i:{body[0]})" + body[1:] if body[0].isalpha() else body, re.S)

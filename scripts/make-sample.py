#!/usr/bin/env python3
"""Writes the gallery sample data set: Artist and Artwork records as NDJSON in the CloudKit Web
Services record form (Samples/README.md describes it).

usage: python3 scripts/make-sample.py [OUTPUT]      (default: Samples/gallery.ndjson in this repository)

Deterministic: a fixed seed and the standard library only, so the same file comes out every time.
About one record in ten uses the shorthand field form (a bare JSON value whose type is inferred),
so both forms the loader accepts are exercised.
"""
import json
import math
import os
import random
import sys
from datetime import datetime, timezone

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 20240601
ARTWORK_COUNT = 300
SHORTHAND_SHARE = 0.10
NO_SYSTEM_SHARE = 0.08
ZONE = {"zoneName": "_defaultZone", "ownerRecordName": "__defaultOwner__"}
USERS = ["_curator", "_curator", "_curator", "_registrar", "_archivist"]

CITIES = {
    "Abuja": (9.0765, 7.3986), "Accra": (5.6037, -0.1870), "Amsterdam": (52.3676, 4.9041),
    "Auckland": (-36.8485, 174.7633), "Barcelona": (41.3874, 2.1686), "Beijing": (39.9042, 116.4074),
    "Beirut": (33.8938, 35.5018), "Berlin": (52.5200, 13.4050), "Bogotá": (4.7110, -74.0721),
    "Brussels": (50.8503, 4.3517), "Bucharest": (44.4268, 26.1025), "Budapest": (47.4979, 19.0402),
    "Buenos Aires": (-34.6037, -58.3816), "Cairo": (30.0444, 31.2357), "Cape Town": (-33.9249, 18.4241),
    "Chengdu": (30.5728, 104.0668), "Chennai": (13.0827, 80.2707), "Chicago": (41.8781, -87.6298),
    "Copenhagen": (55.6761, 12.5683), "Cusco": (-13.5320, -71.9675), "Dhaka": (23.8103, 90.4125),
    "Dublin": (53.3498, -6.2603), "Florence": (43.7696, 11.2558), "Guadalajara": (20.6597, -103.3496),
    "Hanoi": (21.0278, 105.8342), "Helsinki": (60.1699, 24.9384), "Honolulu": (21.3069, -157.8583),
    "Istanbul": (41.0082, 28.9784), "Izmir": (38.4237, 27.1428), "Johannesburg": (-26.2041, 28.0473),
    "Kraków": (50.0647, 19.9450), "Kyoto": (35.0116, 135.7681), "Lagos": (6.5244, 3.3792),
    "Lisbon": (38.7223, -9.1393), "London": (51.5074, -0.1278), "Lyon": (45.7640, 4.8357),
    "Marrakesh": (31.6295, -7.9811), "Marseille": (43.2965, 5.3698), "Melbourne": (-37.8136, 144.9631),
    "Mexico City": (19.4326, -99.1332), "Montréal": (45.5019, -73.5674), "Mumbai": (19.0760, 72.8777),
    "Munich": (48.1351, 11.5820), "New York": (40.7128, -74.0060), "Osaka": (34.6937, 135.5023),
    "Paris": (48.8566, 2.3522), "Prague": (50.0755, 14.4378), "Rio de Janeiro": (-22.9068, -43.1729),
    "Saint Petersburg": (59.9311, 30.3609), "Santiago": (-33.4489, -70.6693), "São Paulo": (-23.5505, -46.6333),
    "Sapporo": (43.0618, 141.3545), "Seoul": (37.5665, 126.9780), "Shanghai": (31.2304, 121.4737),
    "Stockholm": (59.3293, 18.0686), "Sydney": (-33.8688, 151.2093), "Tokyo": (35.6762, 139.6503),
    "Vancouver": (49.2827, -123.1207), "Venice": (45.4408, 12.3155), "Aarhus": (56.1629, 10.2039),
}

# (name, country, home city, media the artist works in). The list position gives the record name:
# artist-01 is the first entry. Mei Chen is artist-07, the README's reference example.
ARTISTS = [
    ("Zoë Brönte", "United Kingdom", "London", ["oil", "charcoal"]),
    ("Amélie Laurent", "France", "Lyon", ["watercolour", "gouache"]),
    ("Hiroshi Tanaka", "Japan", "Kyoto", ["ink", "woodcut"]),
    ("Olusegun Adeyemi", "Nigeria", "Lagos", ["bronze", "mixed media"]),
    ("Ingrid Sørensen", "Denmark", "Copenhagen", ["photograph"]),
    ("José Álvarez", "Mexico", "Mexico City", ["oil", "acrylic"]),
    ("Mei Chen", "China", "Shanghai", ["ink", "watercolour"]),
    ("Lucía Hernández", "Mexico", "Guadalajara", ["ceramic", "textile"]),
    ("Rafael Costa", "Brazil", "São Paulo", ["acrylic", "mixed media"]),
    ("Aiko Watanabe", "Japan", "Tokyo", ["photograph"]),
    ("Björn Lindqvist", "Sweden", "Stockholm", ["oil"]),
    ("Priya Raman", "India", "Chennai", ["gouache", "textile"]),
    ("Kwame Mensah", "Ghana", "Accra", ["bronze", "textile"]),
    ("Élodie Marchand", "France", "Paris", ["oil", "watercolour"]),
    ("Matteo Rossi", "Italy", "Florence", ["marble", "bronze"]),
    ("Anna Kowalska", "Poland", "Kraków", ["lithograph", "ink"]),
    ("Dmitri Volkov", "Russia", "Saint Petersburg", ["oil"]),
    ("Søren Kjær", "Denmark", "Aarhus", ["ceramic"]),
    ("Fatima Zahra Benali", "Morocco", "Marrakesh", ["textile", "photograph"]),
    ("Liam O'Connell", "Ireland", "Dublin", ["oil", "charcoal"]),
    ("Chloé Dubois", "Belgium", "Brussels", ["acrylic"]),
    ("Tomás Ferreira", "Portugal", "Lisbon", ["photograph", "ink"]),
    ("Yuki Nakamura", "Japan", "Osaka", ["woodcut", "ink"]),
    ("Ji-woo Park", "South Korea", "Seoul", ["mixed media", "photograph"]),
    ("Nguyễn Thị Lan", "Vietnam", "Hanoi", ["lacquer", "watercolour"]),
    ("Ahmet Yılmaz", "Turkey", "Istanbul", ["ceramic", "ink"]),
    ("Leilani Kahale", "United States", "Honolulu", ["acrylic", "photograph"]),
    ("Grace Whitfield", "United States", "New York", ["oil", "acrylic"]),
    ("Marcus Bell", "United States", "Chicago", ["photograph"]),
    ("Sofía Ramírez", "Argentina", "Buenos Aires", ["oil", "lithograph"]),
    ("Mateo Quispe", "Peru", "Cusco", ["textile", "ceramic"]),
    ("Hannah Becker", "Germany", "Berlin", ["mixed media", "charcoal"]),
    ("Jürgen Müller", "Germany", "Munich", ["bronze"]),
    ("Lotte de Vries", "Netherlands", "Amsterdam", ["oil", "watercolour"]),
    ("Eero Mäkinen", "Finland", "Helsinki", ["woodcut", "photograph"]),
    ("Nadia Haddad", "Lebanon", "Beirut", ["oil", "mixed media"]),
    ("Tariq Rahman", "Bangladesh", "Dhaka", ["watercolour"]),
    ("Amara Okafor", "Nigeria", "Abuja", ["acrylic", "textile"]),
    ("Isabela Duarte", "Brazil", "Rio de Janeiro", ["photograph", "acrylic"]),
    ("Chen Jing", "China", "Beijing", ["ink", "oil"]),
    ("Wei Zhang", "China", "Chengdu", ["bronze", "marble"]),
    ("Kenji Morimoto", "Japan", "Sapporo", ["photograph"]),
    ("Charlotte Brennan", "Australia", "Sydney", ["oil", "watercolour"]),
    ("Daniel Walker", "Australia", "Melbourne", ["acrylic", "photograph"]),
    ("Aroha Ngata", "New Zealand", "Auckland", ["textile", "mixed media"]),
    ("Mónica Ibáñez", "Spain", "Barcelona", ["ceramic", "oil"]),
    ("Giulia Bianchi", "Italy", "Venice", ["watercolour", "lithograph"]),
    ("Ferenc Szabó", "Hungary", "Budapest", ["charcoal", "oil"]),
    ("Magdalena Nováková", "Czechia", "Prague", ["lithograph", "ink"]),
    ("Andreea Popescu", "Romania", "Bucharest", ["oil"]),
    ("Elif Demir", "Turkey", "Izmir", ["photograph", "ceramic"]),
    ("Thandiwe Nkosi", "South Africa", "Johannesburg", ["mixed media", "bronze"]),
    ("Pieter van der Merwe", "South Africa", "Cape Town", ["oil", "watercolour"]),
    ("Camille Rousseau", "Canada", "Montréal", ["acrylic", "charcoal"]),
    ("Ethan Clarke", "Canada", "Vancouver", ["photograph", "woodcut"]),
    ("Valentina Cruz", "Colombia", "Bogotá", ["oil", "gouache"]),
    ("Diego Fernández", "Chile", "Santiago", ["bronze", "charcoal"]),
    ("Ananya Iyer", "India", "Mumbai", ["photograph", "mixed media"]),
    ("Yasmin Farouk", "Egypt", "Cairo", ["gouache", "ink"]),
    ("François Lefèvre", "France", "Marseille", ["oil", "watercolour"]),
]

# Galleries and museums where the works hang: (name, latitude, longitude).
VENUES = [
    ("Musée du Louvre", 48.8606, 2.3376), ("Musée d'Orsay", 48.8600, 2.3266),
    ("Centre Pompidou", 48.8607, 2.3524), ("Musée de l'Orangerie", 48.8638, 2.3226),
    ("Musée Picasso", 48.8597, 2.3624), ("Fondation Louis Vuitton", 48.8766, 2.2634),
    ("National Gallery", 51.5089, -0.1283), ("Tate Modern", 51.5076, -0.0994),
    ("Tate Britain", 51.4910, -0.1278), ("The Museum of Modern Art", 40.7614, -73.9776),
    ("The Metropolitan Museum of Art", 40.7794, -73.9632), ("Solomon R. Guggenheim Museum", 40.7830, -73.9590),
    ("Whitney Museum", 40.7396, -74.0089), ("Mori Art Museum", 35.6605, 139.7293),
    ("National Museum of Western Art", 35.7153, 139.7757), ("Tokyo National Museum", 35.7188, 139.7765),
    ("Museo Frida Kahlo", 19.3551, -99.1625), ("Palacio de Bellas Artes", 19.4352, -99.1412),
    ("Museo Soumaya", 19.4406, -99.2047), ("Art Gallery of New South Wales", -33.8688, 151.2173),
    ("Museum of Contemporary Art Australia", -33.8599, 151.2090), ("Museo del Prado", 40.4138, -3.6921),
    ("Museo Reina Sofía", 40.4086, -3.6945), ("Rijksmuseum", 52.3600, 4.8852),
    ("Galleria degli Uffizi", 43.7678, 11.2553), ("MASP", -23.5614, -46.6559),
]

TAGS = ["landscape", "portrait", "abstract", "sea", "city", "night", "figure", "nature", "flowers",
        "animals", "architecture", "music", "winter", "light", "rain", "interior", "street",
        "mountain", "river", "dance"]

# Subjects for descriptions, each with the tags that fit it.
SUBJECTS = [
    ("fishing boats moored in a quiet harbour", ["sea", "landscape"]),
    ("a crowded night market under paper lanterns", ["night", "city", "street"]),
    ("the old harbour at sunset", ["sea", "light", "city"]),
    ("a woman reading by an open window", ["portrait", "interior", "light"]),
    ("storm clouds gathering over the sea", ["sea", "landscape", "rain"]),
    ("cherry blossoms along a canal", ["flowers", "nature", "river"]),
    ("a cat asleep on a sunlit balcony", ["animals", "interior"]),
    ("dancers resting between rehearsals", ["dance", "figure", "music"]),
    ("rooftops glistening after the rain", ["city", "rain", "architecture"]),
    ("a lighthouse half hidden in winter fog", ["sea", "winter", "architecture"]),
    ("children playing in a public fountain", ["figure", "city", "street"]),
    ("the artist's grandmother in her kitchen", ["portrait", "interior"]),
    ("an empty railway station at dawn", ["architecture", "light", "city"]),
    ("wild horses crossing a dune", ["animals", "landscape", "nature"]),
    ("the city seen from a footbridge", ["city", "river", "architecture"]),
    ("a vineyard during the harvest", ["landscape", "nature"]),
    ("jazz musicians in a smoky café", ["music", "night", "interior"]),
    ("a mountain lake at first light", ["mountain", "landscape", "light"]),
    ("ancient olive trees bent by the wind", ["nature", "landscape"]),
    ("neon signs reflected in puddles", ["night", "city", "rain"]),
    ("a desert road vanishing into heat haze", ["landscape", "light"]),
    ("sunflowers against a cobalt wall", ["flowers", "light"]),
    ("overlapping circles of colour", ["abstract"]),
    ("torn posters on a tram shelter", ["street", "city", "abstract"]),
    ("a snow-covered village at dusk", ["winter", "landscape", "night"]),
    ("herons wading in a river delta", ["animals", "river", "nature"]),
    ("a cellist tuning before a concert", ["music", "portrait"]),
    ("pilgrims climbing a mountain pass", ["mountain", "figure"]),
    ("a ferry crossing the harbour at sunset", ["sea", "light", "city"]),
    ("fragments of a shattered mirror", ["abstract", "light"]),
    ("a greenhouse full of orchids", ["flowers", "interior"]),
    ("fishermen mending nets on a harbour wall", ["sea", "figure"]),
    ("a tango couple in an empty ballroom", ["dance", "interior", "night"]),
    ("the moon rising over a glacier", ["mountain", "winter", "night"]),
    ("market women laughing beneath umbrellas", ["figure", "street", "rain"]),
]

FORMS = {
    "oil": ["oil painting", "canvas in oils"], "watercolour": ["watercolour", "loose watercolour sketch"],
    "acrylic": ["acrylic painting", "large acrylic canvas"], "gouache": ["gouache on paper", "gouache on board"],
    "ink": ["ink drawing", "brush-and-ink scroll"], "charcoal": ["charcoal drawing", "charcoal study"],
    "bronze": ["bronze sculpture", "cast bronze"], "marble": ["marble carving", "sculpture in white marble"],
    "ceramic": ["glazed ceramic piece", "stoneware vessel"], "photograph": ["photograph", "silver gelatin print"],
    "woodcut": ["woodcut print", "colour woodblock print"], "lithograph": ["lithograph", "hand-pulled lithograph"],
    "textile": ["woven tapestry", "embroidered textile"], "mixed media": ["mixed-media assemblage", "collage"],
    "lacquer": ["lacquer panel", "layered lacquer painting"],
}

OPENINGS = ["A", "A quiet", "A vivid", "A melancholy", "A playful", "An intimate", "A monumental",
            "A luminous", "A restless", "A tender", "A bold", "A dreamlike"]
DETAILS = [  # fit any medium
    "", "", "", " with a striking play of light and shadow", ", seen from an unusual high viewpoint",
    " with tiny figures almost lost in the composition", ", full of humour and small surprises",
    ", at once stern and tender", " that seems to change with the time of day",
]
PAINT_DETAILS = [  # fit paint, ink and prints on a flat surface
    ", worked in quick, nervous strokes", ", rendered in muted greens and ochres",
    " in a palette of indigo and rust", ", built up from dozens of translucent layers",
    " whose edges dissolve into blank paper", ", framed by a heavy gilded border",
]
FLAT_MEDIA = {"oil", "watercolour", "acrylic", "gouache", "ink", "woodcut", "lithograph", "lacquer"}
# How a bio names the practice: "works mainly in photography and ceramics".
PRACTICE = {"photograph": "photography", "ceramic": "ceramics", "lithograph": "lithography",
            "textile": "textiles"}
SECOND_SENTENCES = [
    "It was first shown in {city} in {year}.",
    "It belongs to a series made after a long journey through {region}.",
    "Critics have compared its palette to the Fauves.",
    "A gift from a private collector in {city}.",
    "Conserved in {year}, after decades in a damp storeroom.",
    "One of the artist's most reproduced works.",
    "The artist returned to this motif many times over the following decade.",
    "Visitors often linger here: the piece rewards a slow, patient look.",
    "Sketches for it survive in the artist's notebooks.",
    "It caused a small scandal when it was first exhibited.",
    "The title comes from a poem the artist loved as a child.",
    "X-rays revealed an earlier, abandoned version underneath.",
]
REGIONS = ["the Andes", "Patagonia", "the Sahara", "Hokkaidō", "the Balkans", "Anatolia", "Lapland",
           "the Mekong delta", "the Scottish Highlands", "Rajasthan", "the Atacama", "Provence"]

ADJECTIVES = ["Quiet", "Golden", "Blue", "Broken", "Distant", "Silent", "Burning", "Forgotten", "Pale",
              "Crimson", "Luminous", "Hidden", "Endless", "Restless", "Tender", "Wild", "Frozen",
              "Velvet", "Amber", "Scarlet", "Drifting", "Sleeping", "Hollow", "Electric", "Nocturnal"]
NOUNS = ["Garden", "Harbour", "River", "Mirror", "Window", "Orchard", "Lantern", "Horizon", "Tide",
         "Bridge", "Meadow", "Staircase", "Cathedral", "Lighthouse", "Forest", "Dune", "Market",
         "Courtyard", "Balcony", "Archipelago", "Labyrinth", "Glacier", "Vineyard", "Orchestra", "Carousel"]
TIMES = ["Dawn", "Dusk", "Midnight", "Noon", "Low Tide", "First Snow"]
COLOURS = ["Blue", "Ochre", "Vermilion", "Grey", "Green", "Violet", "White"]
PLACES = ["the Seine", "Kyoto", "Valparaíso", "the Bosphorus", "Reykjavík", "Lisbon", "the Thames",
          "Marrakesh", "Montmartre", "Oaxaca", "Hạ Long Bay", "the Danube"]
ACCENTED_TITLES = ["Rêverie", "Café de Flore", "Fenêtre ouverte", "Jardín de invierno", "Mañana",
                   "Été indien", "Sérénade", "Clair de lune", "Noël à Montréal", "Über den Wolken",
                   "Façade", "Déjà vu", "Bahía", "Névé", "Saudade", "Smörgåsbord", "Ça ira",
                   "Canción del mar", "Fjällvind", "Mélodie en sous-sol"]
FIRST_NAMES = ["Inès", "Ravi", "Yara", "Olek", "Hana", "Thabo", "Lucía", "Mirela", "Tove", "Kofi"]

PLANTED_PRICES = [1000, 1000, 50000, 50000, 100000, 250000, 80, 10000]

T2015 = int(datetime(2015, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
T2025 = int(datetime(2025, 6, 30, tzinfo=timezone.utc).timestamp() * 1000)
T2023 = int(datetime(2023, 1, 10, tzinfo=timezone.utc).timestamp() * 1000)
T2024 = int(datetime(2024, 10, 31, tzinfo=timezone.utc).timestamp() * 1000)
DAY_MS = 86_400_000


# Countries that take an article in running text.
THE = {country: "the " + country for country in ["United Kingdom", "United States", "Netherlands"]}


def artist_name(index):
    return f"artist-{index + 1:02d}"


def make_title(rng):
    shape = rng.randrange(10)
    if shape == 0:
        return f"The {rng.choice(NOUNS)} at {rng.choice(TIMES)}"
    if shape == 1:
        return f"{rng.choice(NOUNS)} in {rng.choice(COLOURS)}"
    if shape == 2:
        return f"Study for {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
    if shape == 3:
        return f"{rng.choice(NOUNS)} over {rng.choice(PLACES)}"
    if shape == 4:
        return rng.choice(ACCENTED_TITLES)
    if shape == 5:
        return f"{rng.choice(NOUNS)} No. {rng.randint(1, 12)}"
    if shape == 6:
        return f"Portrait of {rng.choice(FIRST_NAMES)}"
    if shape == 7:
        return f"Untitled ({rng.choice(ADJECTIVES)} {rng.choice(NOUNS)})"
    return f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"


def make_description(rng, medium, subject, year):
    details = DETAILS + PAINT_DETAILS if medium in FLAT_MEDIA else DETAILS
    text = f"{rng.choice(OPENINGS)} {rng.choice(FORMS[medium])} of {subject}{rng.choice(details)}."
    if rng.random() < 0.7:
        second = rng.choice(SECOND_SENTENCES)
        text += " " + second.format(city=rng.choice(list(CITIES)), year=rng.randint(year, 2024),
                                    region=rng.choice(REGIONS))
    return text


def make_price(rng, medium):
    """Log-normal (a long tail of expensive works), redrawn until within 80..250,000 euros, and
    rounded like a price tag."""
    factor = {"oil": 6.0, "bronze": 3.0, "marble": 3.0, "photograph": 0.5, "ceramic": 0.7}.get(medium, 1.0)
    while True:
        price = rng.lognormvariate(math.log(2000 * factor), 1.6)
        step = 10 if price < 1000 else 50 if price < 10_000 else 500
        price = int(round(price / step) * step)
        if 80 <= price <= 250_000:
            return price


def jitter(rng, latitude, longitude, metres=120):
    dlat = rng.uniform(-metres, metres) / 111_320
    dlon = rng.uniform(-metres, metres) / (111_320 * math.cos(math.radians(latitude)))
    return {"latitude": round(latitude + dlat, 6), "longitude": round(longitude + dlon, 6)}


def system_fields(rng):
    created = rng.randint(T2023, T2024)
    edits = rng.choice([0, 0, 0, 1, 1, 2, 3, 5])
    modified = created + sum(rng.randint(1, 60) * DAY_MS + rng.randint(0, DAY_MS) for _ in range(edits))
    creator = rng.choice(USERS)
    return {
        "created": {"timestamp": created, "userRecordName": creator},
        "modified": {"timestamp": modified, "userRecordName": rng.choice(USERS) if edits else creator},
        "recordChangeTag": str(edits + 1),
    }


def typed(value, type_name):
    return {"value": value, "type": type_name}


def picks(rng, total, share):
    """Exactly round(total * share) of the positions 1...total, so that shares come out as stated."""
    return set(rng.sample(range(1, total + 1), round(total * share)))


def record(rng, record_name, record_type, fields, shorthand, system):
    """fields: name -> (value, type name). Shorthand records write bare values wherever the inferred
    type is the right one; TIMESTAMP has no shorthand (a bare integer reads as INT64), so it stays typed."""
    out = {"recordName": record_name, "recordType": record_type}
    if not shorthand:
        out["zoneID"] = ZONE
    out["fields"] = {
        name: value if shorthand and type_name != "TIMESTAMP" else typed(value, type_name)
        for name, (value, type_name) in fields.items()
    }
    if system:
        out.update(system_fields(rng))
    return out


def make_artists(rng):
    records = []
    shorthand, bare = picks(rng, len(ARTISTS), SHORTHAND_SHARE), picks(rng, len(ARTISTS), NO_SYSTEM_SHARE)
    for index, (name, country, city, media) in enumerate(ARTISTS):
        born = rng.randint(1921, 1998)
        first = name.split()[0]
        practice = " and ".join(PRACTICE.get(medium, medium) for medium in media)
        bio = rng.choice([
            f"{name} was born in {city} in {born} and works mainly in {practice}.",
            f"Based in {city}, {first} is known for {practice} work about memory, water and city life.",
            f"{name} trained in {rng.choice(list(CITIES))} before returning to {city}; {first} works in {practice}.",
            f"A self-taught artist from {THE.get(country, country)}, {first} turned to {practice} after a career in architecture.",
        ])
        if rng.random() < 0.5:
            bio += " " + rng.choice([
                "Their work is held in collections on four continents.",
                f"{first} has taught at the academy in {city} since {min(2020, born + rng.randint(30, 45))}.",
                "A retrospective toured Europe and Asia in 2019.",
                "They describe their studio as a laboratory for slow looking.",
                "Recent work turns to climate, migration and the sea.",
            ])
        latitude, longitude = CITIES[city]
        fields = {
            "name": (name, "STRING"),
            "country": (country, "STRING"),
            "born": (born, "INT64"),
            "bio": (bio, "STRING"),
            "homeCity": ({"latitude": latitude, "longitude": longitude}, "LOCATION"),
        }
        artist = record(rng, artist_name(index), "Artist", fields, index + 1 in shorthand, index + 1 not in bare)
        records.append((artist, born))
    return records


# Works written by hand so that the README's demos have something to find:
# (artist index, title, medium, (subject, tags), venue index).
PLANTED_WORKS = [
    (13, "Sunset over Montmartre", "oil", ("the steps of Sacré-Cœur glowing at sunset", ["city", "light"]), 0),
    (59, "Sunset Harbour, Marseille", "oil", SUBJECTS[28], 1),
    (6, "Sunset at the Old Harbour", "ink", SUBJECTS[2], 13),
    (6, "Rain on the Bund", "ink", SUBJECTS[19], 14),
    (6, "Plum Blossom, Late Snow", "watercolour", ("a plum tree flowering in late snow", ["flowers", "winter"]), 15),
    (6, "Lanterns of Yuyuan", "watercolour", SUBJECTS[1], 9),
]


def make_artworks(rng, artists):
    # A handful of artists are prolific; Mei Chen (index 6) is one of them.
    weights = [rng.choice([1, 1, 2, 3]) for _ in ARTISTS]
    weights[6] = 5
    records = []
    # Prices exactly on round boundaries, at random positions, to tell > from >= in demos.
    positions = rng.sample(range(len(PLANTED_WORKS) + 1, ARTWORK_COUNT + 1), len(PLANTED_PRICES))
    planted_prices = dict(zip(positions, PLANTED_PRICES))
    no_rating, no_tags, no_acquired = (picks(rng, ARTWORK_COUNT, share) for share in (0.10, 0.05, 0.15))
    shorthand, bare = picks(rng, ARTWORK_COUNT, SHORTHAND_SHARE), picks(rng, ARTWORK_COUNT, NO_SYSTEM_SHARE)
    for number in range(1, ARTWORK_COUNT + 1):
        if number <= len(PLANTED_WORKS):
            index, title, medium, (subject, subject_tags), venue_index = PLANTED_WORKS[number - 1]
        else:
            index = rng.choices(range(len(ARTISTS)), weights)[0]
            medium = rng.choice(ARTISTS[index][3])
            title = make_title(rng)
            subject, subject_tags = rng.choice(SUBJECTS)
            venue_index = rng.randrange(len(VENUES))
        _, venue_latitude, venue_longitude = VENUES[venue_index]
        born = artists[index][1]
        fields = {
            "title": (title, "STRING"),
            "artist": ({"recordName": artist_name(index), "action": "NONE"}, "REFERENCE"),
            "medium": (medium, "STRING"),
            "year": (rng.randint(born + 19, min(2024, born + 85)), "INT64"),
            "price": (planted_prices[number] if number in planted_prices else make_price(rng, medium), "INT64"),
        }
        if number not in no_rating:
            fields["rating"] = (round(min(5.0, max(1.0, rng.triangular(1.0, 5.0, 4.0))), 1), "DOUBLE")
        if number not in no_tags:
            pool = subject_tags + [tag for tag in TAGS if tag not in subject_tags]
            count = rng.randint(1, min(4, len(subject_tags) + 1))
            picked = rng.sample(subject_tags, min(count, len(subject_tags)))
            picked += rng.sample(pool[len(subject_tags):], count - len(picked))
            fields["tags"] = (picked, "STRING_LIST")
        if number not in no_acquired:
            made = int(datetime(fields["year"][0], 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
            fields["acquired"] = (rng.randint(max(T2015, made), T2025), "TIMESTAMP")
        fields["location"] = (jitter(rng, venue_latitude, venue_longitude), "LOCATION")
        fields["description"] = (make_description(rng, medium, subject, fields["year"][0]), "STRING")
        fields["onDisplay"] = (1 if rng.random() < 0.7 else 0, "INT64")
        records.append(record(rng, f"art-{number:04d}", "Artwork", fields, number in shorthand, number not in bare))
    return records


def main():
    output = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPOSITORY, "Samples", "gallery.ndjson")
    rng = random.Random(SEED)
    artists = make_artists(rng)
    artworks = make_artworks(rng, artists)
    with open(output, "w", encoding="utf-8", newline="\n") as file:
        for item in [artist for artist, _ in artists] + artworks:
            file.write(json.dumps(item, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{output}: {len(artists)} Artist and {len(artworks)} Artwork records", file=sys.stderr)


if __name__ == "__main__":
    main()
